// Bf16: forward under autocast to bf16 (autocast.hpp), outputs handed back in fp32; bf16 keeps
// fp32's exponent range, so gradients need no loss scaling.
#pragma once

#include "../policy/precision.hpp"
#include "precision.hpp"
#include "without_loss_scaling.hpp"

namespace accel::precision {

template <>
struct Precision<Bf16> : WithoutLossScaling {};

}  // namespace accel::precision
