// accel::estimate_memory<Par>(model, world_size, {...}): the bytes one rank will hold under
// parallelism policy Par at world size W, before anything is prepared, as Accelerate's
// `accelerate estimate-memory` answers for a Hub model. Parameters, gradients and optimizer
// state follow memory_formulas.hpp over the flat parameters Par's strategy says it would build
// for this model (parallel::Strategy<Par>::memory_layout: one per bucket for Zero2, one per unit
// and dtype for Zero3); they match Accelerator::memory_use() between steps (tested at world
// sizes 1 and 2).
//
// Activations, when options give a batch (model->forward(batch)) or a forward of your own: it
// runs once, here, with autograd on, and what the process's heap holds more while its result
// and graph live is counted (glibc's mallinfo2: every arena, the large mmapped blocks too), then
// the graph is dropped. Saved tensors are not enumerable from C++ on libtorch 1.13 (no
// saved-tensor hooks there, and nodes keep their SavedVariables privately), the heap is; so the
// model, batch and forward must be on the CPU. Checkpointed blocks show what they save: their
// inputs only.
#pragma once

#include <malloc.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../detail/error.hpp"
#include "../options.hpp"
#include "../parallel/strategies.hpp"
#include "memory_formulas.hpp"

namespace accel::memory {

struct EstimateOptions {
  OptimizerKind optimizer = OptimizerKind::adam;
  // A batch for model->forward(batch), on the CPU: activations are measured when given...
  std::optional<torch::Tensor> batch = std::nullopt;
  // ...or any forward of yours (autocast, several inputs): what it returns and the graph behind
  // it are measured.
  std::function<torch::Tensor()> forward = nullptr;
  // The rank estimated (the last ranks hold less optimizer state when padding fills their shard).
  int rank = 0;
  // Fsdp<HybridShard>: the ranks of one node, which split the shards (every node holds a copy);
  // 0: world_size (one node).
  int ranks_per_node = 0;
  // Zero2 and Fsdp<ShardGradOp>: the Accelerator's Options::zero2 (bucket caps, reduce-scatters
  // in flight).
  Zero2Options zero2 = {};
  // Count the host memory of save_state(SaveMode::async)'s snapshot (checkpoint_snapshot).
  bool async_checkpoint = false;
};

namespace detail {

// Read from the policy's own constants (policy/parallelism.hpp), as any policy has them.
template <class Par>
constexpr Sharding sharding_for() {
  if constexpr (shards_parameters_v<Par>)
    return Sharding::everything;
  else if constexpr (shards_gradients_v<Par>)
    return Sharding::gradients_and_state;
  else
    return Sharding::replicated;
}

// The heap's bytes in use now (glibc); nullopt elsewhere.
inline std::optional<std::int64_t> heap_in_use() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = ::mallinfo2();
  return static_cast<std::int64_t>(info.uordblks + info.hblkhd);
#else
  return std::nullopt;
#endif
}

inline std::int64_t measure_activations(const std::function<torch::Tensor()>& forward) {
  torch::AutoGradMode grad_mode(true);
  const auto before = heap_in_use();
  if (!before)
    accel::detail::fail("estimate_memory: activations are measured through glibc's heap "
                        "statistics, which this C library lacks; leave batch and forward unset");
  torch::Tensor out = forward();
  const std::int64_t used = *heap_in_use() - *before;
  out = torch::Tensor();  // the graph goes with it
  return std::max<std::int64_t>(used, 0);
}

}  // namespace detail

template <class Par>
MemoryEstimate estimate_memory(torch::nn::Module& model, int world_size,
                               const EstimateOptions& options = {}) {
  if (world_size < 1)
    accel::detail::fail("estimate_memory: world_size is {}; it must be at least 1", world_size);
  if (options.rank < 0 || options.rank >= world_size)
    accel::detail::fail("estimate_memory: rank {} is outside 0..{}; pass a rank of the world size",
                        options.rank, world_size - 1);
  // The strategy answers for its own grouping (parallel/memory_layout.hpp): Zero2's buckets,
  // Zero3's units, Fsdp<HybridShard>'s node.
  const parallel::MemoryLayout layout = parallel::Strategy<Par>::memory_layout(
      model, {world_size, options.rank, options.ranks_per_node, options.zero2.first_bucket_mb,
              options.zero2.bucket_mb});
  MemoryEstimate estimate = estimate_flats(
      detail::sharding_for<Par>(), layout.flats, layout.frozen_bytes, layout.shard_world,
      layout.shard_rank, options.optimizer, options.zero2.reduce_scatters_in_flight,
      options.async_checkpoint);

  if (options.batch || options.forward) {
    for (const auto& p : model.parameters())
      if (!p.device().is_cpu())
        accel::detail::fail("estimate_memory: activations are measured on the CPU, and a "
                            "parameter of the model is on {}; estimate before prepare() or move "
                            "the model to the CPU",
                            p.device().str());
    if (options.batch && !options.batch->device().is_cpu())
      accel::detail::fail("estimate_memory: the batch is on {}; activations are measured on the "
                          "CPU, pass a CPU batch",
                          options.batch->device().str());
    if (!options.forward)
      accel::detail::fail("estimate_memory: a batch needs the model's forward, which a "
                          "torch::nn::Module& does not give; pass the module holder (or "
                          "shared_ptr), or set EstimateOptions::forward");
    estimate.activations = detail::measure_activations(options.forward);
  }
  return estimate;
}

// For a module holder or shared_ptr, with forward(batch) called through it.
template <class Par, class Holder>
  requires requires(Holder& h) { static_cast<torch::nn::Module&>(*h); }
MemoryEstimate estimate_memory(Holder& model, int world_size, EstimateOptions options = {}) {
  if (options.batch && !options.forward) {
    const torch::Tensor batch = *options.batch;
    options.forward = [&model, batch] { return model->forward(batch); };
  }
  return estimate_memory<Par>(static_cast<torch::nn::Module&>(*model), world_size, options);
}

}  // namespace accel::memory

namespace accel {
using memory::estimate_memory;
using memory::EstimateOptions;
using memory::MemoryEstimate;
}  // namespace accel
