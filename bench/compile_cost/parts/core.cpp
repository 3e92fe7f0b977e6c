// compile_cost.sh --parts: accel/core.hpp, the Accelerator alone (accelerator.hpp less launch.hpp, digests, version).
#include <torch/torch.h>
#include <accel/core.hpp>
