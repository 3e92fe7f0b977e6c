// What every parallelism policy does on one process: nothing to communicate, so each
// degenerates to plain local training (world size 1 is valid for every policy). Strategies
// derive from LocalStrategy and replace the hooks they need.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../detail/error.hpp"
#include "../options.hpp"
#include "../runtime/process_group.hpp"
#include "../state/memory_use.hpp"
#include "strategy.hpp"

namespace accel::parallel {

struct LocalStrategy {
  // Whether Options::offload applies: only the sharded strategies keep state to offload
  // (detail/sharded_strategy.hpp).
  static constexpr bool can_offload = false;

  // label names the model in errors ("prepared model #2 (Discriminator)").
  void prepare_model(torch::nn::Module& /*module*/, const std::string& /*label*/) {}
  template <class Optimizer>
  void prepare_optimizer(Optimizer& /*optimizer*/) {}
  void before_forward(torch::nn::Module& /*module*/) {}
  template <class Outputs>
  void after_forward(torch::nn::Module& /*module*/, const Outputs& /*outputs*/) {}
  void before_backward(bool /*sync*/) {}
  void after_backward(bool /*sync*/) {}
  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    optimizer.step();
  }
  // In place rather than set to none: the next backward accumulates into the same storage
  // instead of allocating (docs/benchmarks.md, accel_overhead), and gradients that are views of
  // communication buckets stay views.
  template <class Optimizer>
  void zero_grad(Optimizer& optimizer) {
    torch::NoGradGuard no_grad;
    for (auto& group : optimizer.param_groups())
      for (auto& p : group.params())
        if (p.grad().defined()) p.mutable_grad().zero_();
  }
  // The gradients clip_grad_norm measures and scales for these parameters: this process's part
  // of them (all of them where gradients are replicated).
  std::vector<torch::Tensor> gradients_to_clip(const std::vector<torch::Tensor>& parameters) const {
    std::vector<torch::Tensor> grads;
    for (const auto& p : parameters)
      if (p.grad().defined()) grads.push_back(p.grad());
    return grads;
  }
  // The gradients `optimizer` steps with on this process, for loss scaling to unscale and check.
  std::vector<torch::Tensor> gradients_of(const torch::optim::Optimizer& optimizer) const {
    std::vector<torch::Tensor> grads;
    for (const auto& group : optimizer.param_groups())
      for (const auto& p : group.params())
        if (p.grad().defined()) grads.push_back(p.grad());
    return grads;
  }
  // Combines this process's part of the gradient norm (the sum of |g|^p, or the max |g| for the
  // infinity norm) with the other ranks'; one process holds it all.
  torch::Tensor reduce_norm(torch::Tensor local, bool /*is_max*/) { return local; }
  // Where parameters are sharded at rest, gathers a model's full parameters for code outside
  // its forward, and writes them back to the shards after; elsewhere they are always whole.
  // What the strategy holds beyond the prepared parameters, their .grad and the prepared
  // optimizers' state (Accelerator::memory_use()).
  void count_memory(state::MemoryCounter& /*counter*/) const {}
  void gather_full(torch::nn::Module& /*module*/) {}
  void release_full(torch::nn::Module& /*module*/) {}

  // --- Checkpoints (state/checkpoint.hpp) --------------------------------------------------------
  // A checkpoint stores each parameter, and each piece of element-wise optimizer state, as
  // flattened slices named by the element they start at, so that any strategy at any world size
  // can read what any other wrote. Replicated here: rank 0 writes whole parameters and state,
  // and every rank reads them whole.
  struct ParameterSlice {
    std::int64_t begin = 0;  // in the flattened parameter
    torch::Tensor data;      // 1-D, aliasing the live parameter (writable under NoGradGuard)
  };
  // One parameter's state in the optimizer that holds it on this rank.
  struct StateSlot {
    torch::optim::Optimizer* holder = nullptr;
    torch::Tensor key;        // the tensor `holder` keeps the state under
    std::size_t group = 0;    // where the parameter sits in the user's optimizer
    std::size_t index = 0;
    std::int64_t begin = 0;   // the slice of the flattened parameter this state covers
    std::int64_t numel = 0;
  };
  // The parameter's shape (sharded strategies keep it while the parameter itself is empty).
  std::vector<std::int64_t> parameter_shape(const torch::Tensor& parameter) const {
    return parameter.sizes().vec();
  }
  std::optional<ParameterSlice> saved_slice(const torch::Tensor& parameter, int rank) const {
    if (rank != 0) return std::nullopt;
    return ParameterSlice{0, parameter.detach().reshape({-1})};
  }
  std::optional<ParameterSlice> loaded_slice(const torch::Tensor& parameter) const {
    return ParameterSlice{0, parameter.detach().view({-1})};
  }
  // saving: the slots this rank writes (rank 0's, the state being replicated); loading: the
  // slots this rank fills (all of them).
  std::vector<StateSlot> state_slots(torch::optim::Optimizer& user, bool saving, int rank) {
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
  bool is_flattened(const torch::Tensor& /*parameter*/) const { return false; }
  // Mid-window: the full local gradient buffers the strategy collects into (one per flat
  // parameter; undefined where none is held), and how they are put back.
  std::vector<torch::Tensor> flat_gradients() const { return {}; }
  void restore_flat_gradients(const std::vector<torch::Tensor>& /*gradients*/) {}
  // After a checkpoint was loaded into the parameters and optimizer state.
  void after_state_loaded() {}
};

// A policy whose multi-process path is not built yet runs on one process only, and says so
// rather than train each rank on its own.
template <class Par>
struct SingleProcessOnly : LocalStrategy {
  void attach(runtime::ProcessGroup* group, const Options& /*options*/) {
    if (group != nullptr)
      accel::detail::fail("{} across {} processes is not available in this version of accel; use Ddp "
                   "(or Fsdp<NoShard>) for multi-process training, or run one process",
                   Par::name, group->size());
  }
};

}  // namespace accel::parallel
