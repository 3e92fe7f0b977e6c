// compile_cost.sh --parts: accel::DataLoader with tensor_tree.hpp (Boost.PFR) and detail/error.hpp (fmt).
#include <torch/torch.h>
#include <accel/data/loader.hpp>
