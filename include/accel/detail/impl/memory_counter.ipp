// MemoryCounter; memory_counter.hpp includes it in header-only mode.
#pragma once

#include "../optimizer_types.hpp"
#include "../memory_counter.hpp"

namespace accel::state {

ACCEL_DECL void MemoryCounter::optimizer_state(const torch::optim::Optimizer& optimizer,
                                               bool offloaded) {
  std::int64_t& kind = offloaded ? use_.offloaded : use_.optimizer_state;
  for (const auto& [key, state] : optimizer.state()) {
    // The optimizer table's rows (detail/optimizer_types.hpp), then LBFGS, which is no row (not
    // element-wise: no strategy shards it, no checkpoint names its state) but whose state is
    // memory all the same.
    if (accel::detail::visit_any_state(*state, [&](const torch::Tensor& t) { add(t, kind); }))
      continue;
    if (const auto* lbfgs = dynamic_cast<const torch::optim::LBFGSParamState*>(state.get())) {
      count_state(kind, {lbfgs->d(), lbfgs->H_diag(), lbfgs->prev_flat_grad()});
      for (const auto* list : {&lbfgs->old_dirs(), &lbfgs->old_stps(), &lbfgs->ro()})
        for (const auto& t : *list) add(t, kind);
    }
  }
}

ACCEL_DECL void MemoryCounter::count_state(std::int64_t& kind,
                                           std::initializer_list<torch::Tensor> tensors) {
  for (const auto& t : tensors) add(t, kind);
}

ACCEL_DECL void MemoryCounter::add(const torch::Tensor& t, std::int64_t& bytes) {
  if (!t.defined() || !t.has_storage()) return;
  const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (seen_.insert(storage).second) bytes += static_cast<std::int64_t>(storage->nbytes());
}

}  // namespace accel::state
