// parallel::Strategy<Par>: the behaviour of a parallelism policy. One specialization per policy,
// meeting the contract in contract.hpp, each in a header of its own (ddp.hpp, zero2.hpp,
// zero3.hpp, fsdp.hpp; strategies.hpp includes them all). The primary template is a readable
// error: for one of accel's policies whose header the translation unit left out, it names the
// header; for a policy nobody taught accel, it says how to teach it.
#pragma once

#include <type_traits>

#include "../policy/parallelism.hpp"
#include "../policy/tensor_parallel.hpp"

namespace accel::parallel {

// accel's policies whose Strategy is not in <accel/accelerator_class.hpp> (it includes Ddp's,
// the default).
template <class Par>
inline constexpr bool in_own_header = std::is_same_v<Par, Zero2> || std::is_same_v<Par, Zero3>;
template <class Sharding>
inline constexpr bool in_own_header<Fsdp<Sharding>> = true;
template <class Outer, class Dimension>
inline constexpr bool in_own_header<policy::Composed<Outer, Dimension>> = true;

template <class Par>
struct Strategy {
  static_assert(!in_own_header<Par>,
                "accel: this parallelism policy's strategy is in a header the translation unit "
                "does not include: #include <accel/parallel/zero2.hpp> for Zero2, "
                "<accel/parallel/zero3.hpp> for Zero3, <accel/parallel/fsdp.hpp> for Fsdp<...>, "
                "or <accel/accelerator.hpp>, which includes every policy's");
  // Only a policy without a specialization gets here: if it is not one of accel's, nobody
  // taught accel.
  static_assert(in_own_header<Par>,
                "accel: no parallel::Strategy specialization for this parallelism policy; "
                "specialize accel::parallel::Strategy<YourPolicy> or use Ddp, Zero2, Zero3, "
                "Fsdp<...>");
  // Tells the contract check (contract.hpp) that the assertion above has already spoken.
  using not_specialized = void;
};

}  // namespace accel::parallel
