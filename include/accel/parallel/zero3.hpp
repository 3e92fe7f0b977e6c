// Zero3: parameters, gradients and optimizer state sharded across ranks.
// This version runs it on one process only (parallel/local.hpp).
#pragma once

#include "../policy/parallelism.hpp"
#include "local.hpp"

namespace accel::parallel {

template <>
struct Strategy<Zero3> : SingleProcessOnly<Zero3> {};

}  // namespace accel::parallel
