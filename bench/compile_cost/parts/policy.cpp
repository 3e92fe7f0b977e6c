// compile_cost.sh --parts: the policy types and their rules (no torch or fmt of their own).
#include <torch/torch.h>
#include <accel/policy.hpp>
