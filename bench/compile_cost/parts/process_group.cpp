// compile_cost.sh --parts: accel/runtime/process_group.hpp: torch_compat.hpp, direct_gloo.hpp, the group.
#include <torch/torch.h>
#include <accel/runtime/process_group.hpp>
