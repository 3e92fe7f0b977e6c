// compile_cost.sh --parts: accel/memory.hpp (activation checkpointing, estimate_memory), opt-in.
#include <torch/torch.h>
#include <accel/memory.hpp>
