// Three roles of the strategy contract (contract.hpp) for state every rank holds whole, taken
// whole by strategies that replicate it (Ddp and Fsdp<NoShard> take all three) and called by
// name where a sharded strategy has nothing sharded yet (one process, a frozen parameter):
//
//   ReplicatedGradients   each rank's gradients are all of them
//   WholeParameters       nothing beyond parameters, gradients and optimizer state; nothing to
//                         offload or gather
//   ReplicatedCheckpoint  rank 0 writes whole parameters and state; every rank reads them whole
//
// And zero_grad_in_place, the zero_grad every strategy builds on.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "../detail/memory_counter.hpp"
#include "contract.hpp"
#include "detail/layout_groups.hpp"

namespace accel::parallel {

// In place rather than set to none: the next backward accumulates into the same storage instead
// of allocating (with glibc's default heap, every backward would fault its gradients in again:
// docs/concepts/performance.md, "One process"), and gradients that are views of
// communication buckets stay views.
inline void zero_grad_in_place(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params())
      if (p.grad().defined()) p.mutable_grad().zero_();
}

struct ReplicatedGradients {
  // The gradients clip_grad_norm measures and scales for these parameters.
  static std::vector<torch::Tensor> gradients_to_clip(const std::vector<torch::Tensor>& parameters) {
    std::vector<torch::Tensor> grads;
    for (const auto& p : parameters)
      if (p.grad().defined()) grads.push_back(p.grad());
    return grads;
  }
  // The gradients `optimizer` steps with, for loss scaling to unscale and check.
  static std::vector<torch::Tensor> gradients_of(const torch::optim::Optimizer& optimizer) {
    std::vector<torch::Tensor> grads;
    for (const auto& group : optimizer.param_groups())
      for (const auto& p : group.params())
        if (p.grad().defined()) grads.push_back(p.grad());
    return grads;
  }
  // This rank's part of the gradient norm (the sum of |g|^p, or the max |g| for the infinity
  // norm) is the whole of it.
  static torch::Tensor reduce_norm(torch::Tensor local, bool /*is_max*/) { return local; }
};

struct WholeParameters {
  // Whether Options::offload applies: only strategies that shard keep state to offload.
  static constexpr bool can_offload = false;
  // Every rank holds the whole model: an empty build is materialized whole before prepare_model.
  static constexpr bool deferred_models = false;
  // What the strategy holds beyond the prepared parameters, their .grad and the prepared
  // optimizers' state (Accelerator::memory_use()).
  static void count_memory(state::MemoryCounter& /*counter*/) {}
  // estimate_memory's question (memory_layout.hpp): the whole model, one flat per dtype.
  static MemoryLayout memory_layout(torch::nn::Module& model, const LayoutRequest& request) {
    return detail::whole_layout(model, request);
  }
  // Where parameters are sharded at rest, gathers a model's full parameters for code outside its
  // forward, and writes them back to the shards after; here they are always whole.
  static void gather_full(torch::nn::Module& /*module*/) {}
  static void release_full(torch::nn::Module& /*module*/) {}
};

struct ReplicatedCheckpoint {
  // The parameter's shape (sharded strategies keep it while the parameter itself is empty).
  static std::vector<std::int64_t> parameter_shape(const torch::Tensor& parameter) {
    return parameter.sizes().vec();
  }
  static std::optional<ParameterSlice> saved_slice(const torch::Tensor& parameter, int rank) {
    if (rank != 0) return std::nullopt;
    return ParameterSlice{0, parameter.detach().reshape({-1})};
  }
  static std::optional<ParameterSlice> loaded_slice(const torch::Tensor& parameter) {
    return ParameterSlice{0, parameter.detach().view({-1})};
  }
  // saving: the slots this rank writes (rank 0's, the state being replicated); loading: the
  // slots this rank fills (all of them).
  static std::vector<StateSlot> state_slots(torch::optim::Optimizer& user, bool saving, int rank) {
    std::vector<StateSlot> slots;
    if (saving && rank != 0) return slots;
    const auto& groups = user.param_groups();
    for (std::size_t g = 0; g < groups.size(); ++g)
      for (std::size_t k = 0; k < groups[g].params().size(); ++k) {
        const torch::Tensor& p = groups[g].params()[k];
        slots.push_back({&user, p, g, k, 0, p.numel()});
      }
    return slots;
  }
  // Whether a parameter's gradient lives in a flat gradient buffer of the strategy (saved as
  // such mid-window) rather than in its own .grad.
  static bool is_flattened(const torch::Tensor& /*parameter*/) { return false; }
  // Mid-window: the full local gradient buffers the strategy collects into (one per flat
  // parameter; undefined where none is held), and how they are put back.
  static std::vector<torch::Tensor> flat_gradients() { return {}; }
  static void restore_flat_gradients(const std::vector<torch::Tensor>& /*gradients*/) {}
  // After a checkpoint was loaded into the parameters and optimizer state.
  static void after_state_loaded() {}
};

}  // namespace accel::parallel
