// Whether any rank says yes: one 4-byte all-reduce (max) that every rank calls at the same point,
// so that all of them take the same decision (a loss scaler's inf/nan, a trigger, an optimizer
// that already holds state, a batch size that ran out of memory). Without a group (one
// process), this rank's own answer.
#pragma once

#include <torch/torch.h>

#include "../detail/small_tensor.hpp"
#include "process_group.hpp"

namespace accel::runtime {

inline bool any_rank(ProcessGroup* group, bool mine) {
  if (group == nullptr) return mine;
  torch::Tensor flag = accel::detail::one_value(mine ? 1 : 0, torch::kInt);
  group->allreduce(flag, ReduceOp::max);
  return flag.item<int>() != 0;
}

}  // namespace accel::runtime
