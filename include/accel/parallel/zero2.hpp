// Zero2: optimizer state and gradients sharded across ranks, parameters replicated.
// This version runs it on one process only (parallel/local.hpp).
#pragma once

#include "../policy/parallelism.hpp"
#include "local.hpp"

namespace accel::parallel {

template <>
struct Strategy<Zero2> : SingleProcessOnly<Zero2> {};

}  // namespace accel::parallel
