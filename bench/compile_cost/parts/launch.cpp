// compile_cost.sh --parts: accel/launch.hpp: the launcher (supervisor, spawn, output threads).
#include <torch/torch.h>
#include <accel/launch.hpp>
