// compile_cost.sh --parts: c10d's Gloo process group alone, with the Gloo headers it includes.
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
