// compile_cost.sh --parts: accel/accelerator_class.hpp, the Accelerator alone (accelerator.hpp less launch.hpp, digests, version).
#include <torch/torch.h>
#include <accel/accelerator_class.hpp>
