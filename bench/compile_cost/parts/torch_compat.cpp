// compile_cost.sh --parts: accel/detail/torch_compat.hpp: c10d's stores and Gloo group, ATen autocast.
#include <torch/torch.h>
#include <accel/detail/torch_compat.hpp>
