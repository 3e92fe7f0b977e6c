// Bf16: forward under autocast to bf16 (autocast.hpp), outputs handed back in fp32; bf16 keeps
// fp32's exponent range, so gradients need no loss scaling.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "../options.hpp"
#include "../policy/precision.hpp"
#include "../runtime/process_group.hpp"
#include "precision.hpp"
#include "without_loss_scaling.hpp"

namespace accel::precision {

template <>
struct Precision<Bf16> : WithoutLossScaling {
  void attach(runtime::ProcessGroup* /*group*/, const Options& /*options*/,
              const torch::Device& /*device*/) {}
  void prepare_model(const std::shared_ptr<torch::nn::Module>& /*model*/,
                     const std::string& /*label*/) {}
};

}  // namespace accel::precision
