// precision::Precision<Prec>: the behaviour of a precision policy around the training step. One
// specialization per policy, meeting the contract in contract.hpp, each in a header of its own
// (fp32.hpp, bf16.hpp, fp16.hpp, fp8.hpp; policies.hpp includes them all). The primary template
// is a readable error: for one of accel's policies whose header the translation unit left out,
// it names the header; for a policy nobody taught accel, it says how to teach it.
// Forward runs under precision::Autocast<Prec> (autocast.hpp), chosen by Prec::autocast.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../policy/precision.hpp"

namespace accel::precision {

// accel's policies whose Precision is not in <accel/accelerator_class.hpp> (it includes Fp32's,
// the default).
template <class Prec>
inline constexpr bool in_own_header =
    std::is_same_v<Prec, Bf16> || std::is_same_v<Prec, Fp16> || std::is_same_v<Prec, Fp8>;

template <class Prec>
struct Precision {
  static_assert(!in_own_header<Prec>,
                "accel: this precision policy's behaviour is in a header the translation unit "
                "does not include: #include <accel/precision/bf16.hpp> for Bf16, "
                "<accel/precision/fp16.hpp> for Fp16, <accel/precision/fp8.hpp> for Fp8, or "
                "<accel/accelerator.hpp>, which includes every policy's");
  // Only a policy without a specialization gets here: if it is not one of accel's, nobody
  // taught accel.
  static_assert(in_own_header<Prec>,
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
