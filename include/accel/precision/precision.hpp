// precision::Precision<Prec>: the behaviour of a precision policy around the training step. One
// specialization per policy (fp32.hpp, bf16.hpp, fp16.hpp, fp8.hpp), meeting the contract in
// contract.hpp; the primary template is a readable error for a policy nobody taught accel.
// Forward runs under precision::Autocast<Prec> (autocast.hpp), chosen by Prec::autocast.
#pragma once

#include <cstdint>

#include "../detail/dependent_false.hpp"

namespace accel::precision {

template <class Prec>
struct Precision {
  static_assert(accel::detail::dependent_false<Prec>,
                "accel: no precision::Precision specialization for this precision policy; "
                "specialize accel::precision::Precision<YourPolicy> (deriving from "
                "accel::precision::WithoutLossScaling, or DynamicLossScaling) or use Fp32, Bf16, "
                "Fp16, Fp8");
  // Tells the contract check (contract.hpp) that the assertion above has already spoken.
  using not_specialized = void;
};

// Where a backward() falls, for a precision that acts once per accumulation window: a window
// begins at the first backward() whose position is 1 and whose micro-step is new (several
// backward() calls of one micro-step, as a GAN's, share it).
struct WindowPosition {
  std::uint64_t micro_step = 0;  // micro-steps begun since construction
  int position = 1;              // 1..N within the window of N
  bool begins_window(std::uint64_t last_micro_step) const {
    return position == 1 && micro_step != last_micro_step;
  }
};

}  // namespace accel::precision
