// Every precision policy's behaviour: the one header the Accelerator includes for them.
#pragma once

#include "autocast.hpp"
#include "bf16.hpp"
#include "fp16.hpp"
#include "fp32.hpp"
#include "fp8.hpp"
#include "precision.hpp"

#include <tuple>

namespace accel::precision {

// Every precision policy accel defines. Tests run each of them (tests/distributed/
// worker_precision.cpp): a policy added to accel is added here.
using AllPolicies = std::tuple<Fp32, Bf16, Fp16, Fp8>;

}  // namespace accel::precision
