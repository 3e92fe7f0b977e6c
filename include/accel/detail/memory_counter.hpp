// What this rank holds for training, in bytes: parameters, gradients and optimizer state. Each
// storage is counted once, under the first kind it is met as, whatever views of it exist (a
// Zero2 shard is a view of its flat buffer; Ddp's gradients are views of their buckets), and a
// storage freed to 0 bytes (a Zero3 unit between uses) counts nothing.
//
// Support for the layers above: the strategies count what they hold into it (the contract's
// count_memory, parallel/contract.hpp), and the Accelerator returns its MemoryUse.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <initializer_list>
#include <unordered_set>

#include "separate_compilation.hpp"

namespace accel {

struct MemoryUse {
  std::int64_t parameters = 0;       // bytes, this rank
  std::int64_t gradients = 0;
  std::int64_t optimizer_state = 0;
  // What Options::offload keeps on the CPU instead: parameter shards and their gradients, the
  // CPU copies the optimizer steps, and that optimizer's state. Counted here even when the
  // device is the CPU itself.
  std::int64_t offloaded = 0;
  // Host memory of the snapshot save_state(SaveMode::async) writes from (state/host_snapshot.hpp):
  // one rank file's tensors, kept for the next save once one was taken.
  std::int64_t checkpoint_snapshot = 0;
  std::int64_t total() const {
    return parameters + gradients + optimizer_state + offloaded + checkpoint_snapshot;
  }
};

namespace state {

class MemoryCounter {
 public:
  void parameter(const torch::Tensor& t) { add(t, use_.parameters); }
  void gradient(const torch::Tensor& t) { add(t, use_.gradients); }
  void offloaded(const torch::Tensor& t) { add(t, use_.offloaded); }
  // The state tensors of the optimizer table's rows (detail/optimizer_table.hpp: SGD, Adam,
  // AdamW, Adagrad, RMSprop) and of LBFGS; the state of an optimizer class of your own is not
  // seen (libtorch gives no generic way to list it).
  // offloaded: it steps on the CPU for Options::offload.
  ACCEL_DECL void optimizer_state(const torch::optim::Optimizer& optimizer, bool offloaded = false);
  const MemoryUse& use() const { return use_; }

 private:
  ACCEL_DECL void count_state(std::int64_t& kind, std::initializer_list<torch::Tensor> tensors);
  ACCEL_DECL void add(const torch::Tensor& t, std::int64_t& bytes);

  MemoryUse use_;
  std::unordered_set<const void*> seen_;
};

}  // namespace state
}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/memory_counter.ipp"
#endif
