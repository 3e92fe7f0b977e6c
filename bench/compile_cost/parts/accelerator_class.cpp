// compile_cost.sh --parts: accel/accelerator_class.hpp, the Accelerator with Ddp and Fp32 only (accelerator.hpp less the other policies, launch.hpp, digests, version).
#include <torch/torch.h>
#include <accel/accelerator_class.hpp>
