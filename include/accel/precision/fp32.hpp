// Fp32: forward in fp32, no autocast, no loss scaling.
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
struct Precision<Fp32> : WithoutLossScaling {
  void attach(runtime::ProcessGroup* /*group*/, const Options& /*options*/,
              const torch::Device& /*device*/) {}
  void prepare_model(const std::shared_ptr<torch::nn::Module>& /*model*/,
                     const std::string& /*label*/) {}
};

}  // namespace accel::precision
