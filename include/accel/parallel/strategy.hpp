// parallel::Strategy<Par>: the behaviour of a parallelism policy. One specialization per policy,
// meeting the contract in contract.hpp; the primary template is a readable error for a policy
// nobody taught accel.
#pragma once

#include "../detail/dependent_false.hpp"

namespace accel::parallel {

template <class Par>
struct Strategy {
  static_assert(accel::detail::dependent_false<Par>,
                "accel: no parallel::Strategy specialization for this parallelism policy; "
                "specialize accel::parallel::Strategy<YourPolicy> or use Ddp, Zero2, Zero3, "
                "Fsdp<...>");
  // Tells the contract check (contract.hpp) that the assertion above has already spoken.
  using not_specialized = void;
};

}  // namespace accel::parallel
