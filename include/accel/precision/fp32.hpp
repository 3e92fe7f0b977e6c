// Fp32: forward in fp32, no autocast, no loss scaling.
#pragma once

#include "../policy/precision.hpp"
#include "precision.hpp"
#include "without_loss_scaling.hpp"

namespace accel::precision {

template <>
struct Precision<Fp32> : WithoutLossScaling {};

}  // namespace accel::precision
