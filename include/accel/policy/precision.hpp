// Precision policies: the dtype forward runs in and how the loss is scaled. Master weights and
// optimizer state stay fp32 under every policy.
#pragma once

#include <string_view>

#include "category.hpp"
#include "compute_type.hpp"

namespace accel {

/// fp32 throughout: no autocast, no loss scaling.
struct Fp32 {
  /// @{
  /// What the composition rules and the precision's behaviour read about this policy.
  using category = policy::precision_tag;
  static constexpr std::string_view name = "Fp32";
  static constexpr policy::ComputeType compute = policy::ComputeType::float32;
  static constexpr bool autocast = false;
  static constexpr bool loss_scaling = false;
  /// @}
};

/// bf16 has fp32's exponent range: no loss scaling needed.
struct Bf16 {
  /// @{
  /// What the composition rules and the precision's behaviour read about this policy.
  using category = policy::precision_tag;
  static constexpr std::string_view name = "Bf16";
  static constexpr policy::ComputeType compute = policy::ComputeType::bfloat16;
  static constexpr bool autocast = true;
  static constexpr bool loss_scaling = false;
  /// @}
};

/// fp16 underflows small gradients: dynamic loss scaling, steps skipped on inf/nan.
struct Fp16 {
  /// @{
  /// What the composition rules and the precision's behaviour read about this policy.
  using category = policy::precision_tag;
  static constexpr std::string_view name = "Fp16";
  static constexpr policy::ComputeType compute = policy::ComputeType::float16;
  static constexpr bool autocast = true;
  static constexpr bool loss_scaling = true;
  /// @}
};

/// e4m3 in forward, e5m2 in backward, with delayed (amax history) scaling.
struct Fp8 {
  /// @{
  /// What the composition rules and the precision's behaviour read about this policy.
  using category = policy::precision_tag;
  static constexpr std::string_view name = "Fp8";
  static constexpr policy::ComputeType compute = policy::ComputeType::float8;
  static constexpr bool autocast = true;
  static constexpr bool loss_scaling = false;
  /// @}
};

}  // namespace accel
