// A precision policy for tests only: fp32 arithmetic with Fp16's dynamic loss scaling. It runs
// the scaler's whole path through the Accelerator (scaled backward, unscale, skipped steps, the
// ranks agreeing) where fp16 cannot compute: CPU on libtorch 1.13. It is also what a user's own
// precision policy looks like.
#pragma once

#include <accel/accelerator_class.hpp>
#include <accel/precision/dynamic_loss_scaling.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace accel_test {

struct LossScaledFp32 {
  using category = accel::policy::precision_tag;
  static constexpr std::string_view name = "LossScaledFp32";
  static constexpr accel::policy::ComputeType compute = accel::policy::ComputeType::float32;
  static constexpr bool autocast = false;
  static constexpr bool loss_scaling = true;
};

}  // namespace accel_test

// Loss scaling and its state taken whole from DynamicLossScaling; the setup written out, as the
// contract asks (precision/contract.hpp).
template <>
struct accel::precision::Precision<accel_test::LossScaledFp32>
    : accel::precision::DynamicLossScaling {
  void attach(accel::runtime::ProcessGroup* group, const accel::Options& options,
              const torch::Device& device) {
    attach_scaler(group, options, device);
  }
  void prepare_model(const std::shared_ptr<torch::nn::Module>& /*model*/,
                     const std::string& /*label*/) {}
};
