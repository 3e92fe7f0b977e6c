// Gradient accumulation: N micro-batches per optimizer step.
#pragma once

#include <string_view>

#include "category.hpp"

namespace accel {

/// N micro-batches per optimizer step; GradAccum<1>: no accumulation.
template <int N>
struct GradAccum {
  static_assert(N >= 1,
                "accel: GradAccum<N> needs N >= 1 (N is the number of micro-batches per optimizer "
                "step); for no accumulation write GradAccum<1>");
  /// @{
  /// What the composition rules and the Accelerator read about this policy.
  using category = policy::accumulation_tag;
  static constexpr std::string_view name = "GradAccum";
  static constexpr int steps = N;
  /// @}
};

/// No accumulation.
using NoAccumulation = GradAccum<1>;

}  // namespace accel
