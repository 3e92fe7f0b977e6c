// MemoryCounter; memory_use.hpp includes it in header-only mode.
#pragma once

#include "../memory_use.hpp"

namespace accel::state {

ACCEL_DECL void MemoryCounter::optimizer_state(const torch::optim::Optimizer& optimizer,
                                               bool offloaded) {
  std::int64_t& kind = offloaded ? use_.offloaded : use_.optimizer_state;
  for (const auto& [key, state] : optimizer.state()) {
    const auto* s = state.get();
    if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(s))
      count_state(kind, {adam->exp_avg(), adam->exp_avg_sq(), adam->max_exp_avg_sq()});
    else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(s))
      count_state(kind, {adamw->exp_avg(), adamw->exp_avg_sq(), adamw->max_exp_avg_sq()});
    else if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(s))
      count_state(kind, {sgd->momentum_buffer()});
    else if (const auto* adagrad = dynamic_cast<const torch::optim::AdagradParamState*>(s))
      count_state(kind, {adagrad->sum()});
    else if (const auto* rms = dynamic_cast<const torch::optim::RMSpropParamState*>(s))
      count_state(kind, {rms->square_avg(), rms->momentum_buffer(), rms->grad_avg()});
    else if (const auto* lbfgs = dynamic_cast<const torch::optim::LBFGSParamState*>(s)) {
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
