// Fp8: e4m3 forward, e5m2 backward, delayed scaling. Not built yet: it stops at construction
// rather than train in another precision than the one asked for.
#pragma once

#include <torch/torch.h>

#include "../detail/error.hpp"
#include "../options.hpp"
#include "../policy/precision.hpp"
#include "../runtime/process_group.hpp"
#include "precision.hpp"
#include "without_loss_scaling.hpp"

namespace accel::precision {

template <>
struct Precision<Fp8> : WithoutLossScaling {
  void attach(runtime::ProcessGroup* /*group*/, const Options& /*options*/,
              const torch::Device& /*device*/) {
    detail::fail("Fp8 training is not available in this version of accel; use Bf16, or Fp16 "
                 "where fp16 matmul runs");
  }
};

}  // namespace accel::precision
