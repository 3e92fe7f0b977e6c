// compile_cost.sh --parts: accel/accelerator.hpp (what a training loop uses), nothing used: parsing only.
#include <torch/torch.h>
#include <accel/accelerator.hpp>
