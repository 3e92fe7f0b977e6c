// compile_cost.sh --parts: accel/accelerator.hpp, every accel header, nothing used: parsing only.
#include <torch/torch.h>
#include <accel/accelerator.hpp>
