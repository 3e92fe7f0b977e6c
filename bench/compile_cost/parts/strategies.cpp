// compile_cost.sh --parts: accel/parallel/strategies.hpp: Ddp's reducer, Zero2/3, Fsdp (and process_group.hpp).
#include <torch/torch.h>
#include <accel/parallel/strategies.hpp>
