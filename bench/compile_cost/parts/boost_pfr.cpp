// compile_cost.sh --parts: Boost.PFR, which data/tensor_tree.hpp uses to walk sample structs.
#include <torch/torch.h>
#include <boost/pfr.hpp>
