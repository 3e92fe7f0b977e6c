// What this rank holds for training, in bytes: parameters, gradients and optimizer state. Each
// storage is counted once, under the first kind it is met as, whatever views of it exist (a
// Zero2 shard is a view of its flat buffer; Ddp's gradients are views of their buckets), and a
// storage freed to 0 bytes (a Zero3 unit between uses) counts nothing.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <initializer_list>
#include <unordered_set>

namespace accel {

struct MemoryUse {
  std::int64_t parameters = 0;       // bytes, this rank
  std::int64_t gradients = 0;
  std::int64_t optimizer_state = 0;
  // What Options::offload keeps on the CPU instead: parameter shards and their gradients, the
  // CPU copies the optimizer steps, and that optimizer's state. Counted here even when the
  // device is the CPU itself.
  std::int64_t offloaded = 0;
  std::int64_t total() const { return parameters + gradients + optimizer_state + offloaded; }
};

namespace state {

class MemoryCounter {
 public:
  void parameter(const torch::Tensor& t) { add(t, use_.parameters); }
  void gradient(const torch::Tensor& t) { add(t, use_.gradients); }
  void offloaded(const torch::Tensor& t) { add(t, use_.offloaded); }
  // The state tensors of torch::optim's SGD, Adam, AdamW, Adagrad, RMSprop and LBFGS; the state
  // of an optimizer class of your own is not seen (libtorch gives no generic way to list it).
  // offloaded: it steps on the CPU for Options::offload.
  void optimizer_state(const torch::optim::Optimizer& optimizer, bool offloaded = false) {
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
  const MemoryUse& use() const { return use_; }

 private:
  void count_state(std::int64_t& kind, std::initializer_list<torch::Tensor> tensors) {
    for (const auto& t : tensors) add(t, kind);
  }
  void add(const torch::Tensor& t, std::int64_t& bytes) {
    if (!t.defined() || !t.has_storage()) return;
    const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    if (seen_.insert(storage).second) bytes += static_cast<std::int64_t>(storage->nbytes());
  }

  MemoryUse use_;
  std::unordered_set<const void*> seen_;
};

}  // namespace state
}  // namespace accel
