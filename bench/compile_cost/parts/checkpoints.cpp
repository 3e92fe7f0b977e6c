// compile_cost.sh --parts: accel/checkpoints.hpp (save_state and the rest; safetensors, JSON), opt-in.
#include <torch/torch.h>
#include <accel/checkpoints.hpp>
