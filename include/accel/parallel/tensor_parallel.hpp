// Parallel<Outer, TensorParallel<N>>: Megatron-LM's tensor parallelism inside groups of N
// consecutive ranks, the outer policy (Ddp, Zero2, Zero3, Fsdp<FullShard|ShardGradOp>) across
// the groups. Ranks 0..N-1 form tensor-parallel group 0, N..2N-1 group 1, and so on (Megatron's
// order, and torch's DeviceMesh with dimensions ("dp", "tp")); the ranks of the same place in
// every group form a data-parallel group. The subgroups are made as Fsdp<HybridShard> makes its
// own (runtime::ProcessGroup::split), and the outer strategy is attached to the data-parallel
// group alone: it sees a world of world / N ranks, each holding its group's slices.
//
//   prepare_model   rank 0's full model on every rank, then every ColumnParallelLinear and
//                   RowParallelLinear narrowed to this rank's slice (tensor_parallel_linear.hpp),
//                   then the outer strategy's prepare over the data-parallel group: Ddp's
//                   replicas, or Zero2's and Zero3's flat parameters, are made of the slices
//   gradients       the split layers' collectives run inside their forward and backward; the
//                   outer strategy averages (Ddp) or reduce-scatters (Zero2, Zero3) every
//                   gradient over the data-parallel group only (with one group there is nothing
//                   to average: the outer strategy runs as on one process). A replicated
//                   parameter (a LayerNorm, an embedding, a frozen or plain Linear) has the same
//                   gradient on every rank of a tensor-parallel group, because everything outside
//                   the split layers computes the same numbers there: each rank's batch is its
//                   group's batch, a column layer's input gradient is summed over the group, and
//                   a row layer's output is summed before anything else sees it. So they stay
//                   equal without a collective. Under sequence parallelism a marked LayerNorm
//                   and a row layer's bias see 1/N of the tokens: their gradients are summed
//                   over the group inside backward (sequence_parallel.hpp), equal again.
//   clip_grad_norm  each rank adds its part of each gradient the outer strategy hands over (the
//                   whole gradient, or this rank's shard of it): all of a slice's, 1/N of a
//                   replicated one's; the outer strategy sums over the data-parallel group (the
//                   sharded ones, once the gradients are in shards), then the sum goes over the
//                   tensor-parallel group. Each element is counted once: the N data-parallel
//                   groups each hold every replicated element once, and each slice's element once
//   full_parameters the outer strategy's full parameters (Zero3 gathers its shards), then the
//                   split layers' slices gathered into the full weights; after, the slices
//                   written back into the outer strategy's tensors, then its release
//
//   checkpoints     every parameter and its optimizer state in the full tensors' numbering
//                   (tensor_parallel_placements.hpp): the outer strategy's slices of a split
//                   parameter, placed in the full tensor; a replicated one written by the first
//                   rank of each tensor-parallel group only, as the outer strategy writes it
//                   over the data-parallel group. So a checkpoint loads on any mesh, and on one
//                   process (docs/concepts/checkpoints.md)
//
//   memory_layout   estimate_memory's answer: the split layers' parameters 1/N, the others
//                   whole, then the outer strategy's layout over the data-parallel group
//
// The loaders deal batches by data-parallel rank (the Accelerator reads the degree: every rank of
// a tensor-parallel group gets the same batch).
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "../detail/error.hpp"
#include "../policy/tensor_parallel.hpp"
#include "../runtime/process_group.hpp"
#include "ddp.hpp"
#include "fsdp.hpp"
#include "detail/broadcast.hpp"
#include "sequence_parallel.hpp"
#include "memory_layout.hpp"
#include "tensor_parallel_estimate.hpp"
#include "tensor_parallel_linear.hpp"
#include "tensor_parallel_placements.hpp"
#include "zero2.hpp"
#include "zero3.hpp"

namespace accel::parallel {

// A world of `world` ranks splits into tensor-parallel groups of `degree` only when the degree
// divides it; said as the Accelerator is made, before any group is split.
inline void check_tensor_parallel_world(int world, int degree, std::string_view policy) {
  if (world % degree != 0)
    accel::detail::fail("{}: the world size {} is not a multiple of the tensor-parallel degree "
                        "{}; start a multiple of {} processes (accel-launch --nproc), or use "
                        "TensorParallel<N> with an N that divides {}",
                        policy, world, degree, degree, world);
}

// The class each outer policy's strategy is made of: the sharded ones take their name (the
// composed one, for their errors) as they are built; Ddp's is set after.
template <class Outer>
struct OuterStrategy {
  using type = Strategy<Outer>;
};
template <>
struct OuterStrategy<Zero2> {
  using type = ShardedGradientStrategy;
};
template <>
struct OuterStrategy<Fsdp<ShardGradOp>> {
  using type = ShardedGradientStrategy;
};
template <>
struct OuterStrategy<Zero3> {
  using type = FullyShardedStrategy;
};
template <>
struct OuterStrategy<Fsdp<FullShard>> {
  using type = FullyShardedStrategy;
};

template <class Outer, int N>
struct Strategy<policy::Composed<Outer, TensorParallel<N>>> : OuterStrategy<Outer>::type {
  using Base = typename OuterStrategy<Outer>::type;
  static constexpr std::string_view composed_name =
      policy::Composed<Outer, TensorParallel<N>>::name;

  Strategy()
    requires std::constructible_from<Base, std::string_view>
      : Base(composed_name) {}
  Strategy()
    requires(!std::constructible_from<Base, std::string_view>)
  {
    this->name_ = composed_name;
  }

  // An empty build (accel::deferred_init) is materialized whole before prepare_model: the layers
  // are narrowed from the full weights, before the outer strategy flattens anything.
  static constexpr bool deferred_models = false;
  template <class... Arguments>
  void prepare_deferred_model(Arguments&&...) = delete;  // hides the sharded strategies' own

  void attach(runtime::ProcessGroup* group, const Options& options) {
    check_tensor_parallel_world(group == nullptr ? 1 : group->size(), N, composed_name);
    world_ = group;
    runtime::ProcessGroup* data = group;
    if (group != nullptr) {
      // One host: every group on loopback and shared memory; across hosts the groups go through
      // the network (a tensor-parallel group may span two of them).
      const bool one_host = group->local_size() == group->size();
      if (N > 1) tensor_ = group->split("tensor", group->rank() / N, one_host);
      if (N > 1 && group->size() > N) {
        data_ = group->split("data", group->rank() % N, one_host);
        data = data_.get();
      } else if (N > 1) {
        data = nullptr;  // one tensor-parallel group: no replica to average with
      }
    }
    Base::attach(data, options);
  }

  // estimate_memory's question (memory_layout.hpp): the split layers at one rank's slices and
  // the rest whole (tensor_parallel_estimate.hpp), laid out by the outer strategy over the
  // data-parallel group: world / N ranks, this rank's place in it rank / N.
  static MemoryLayout memory_layout(torch::nn::Module& model, LayoutRequest request) {
    if (request.world_size % N != 0)
      accel::detail::fail("estimate_memory: world_size {} is not a multiple of the tensor-parallel "
                          "degree {} of {}; pass a multiple of {}",
                          request.world_size, N, composed_name, N);
    const SplitShapes shapes(model, N, composed_name);
    request.world_size /= N;
    request.rank /= N;
    return Base::memory_layout(model, request);
  }

  void prepare_model(torch::nn::Module& module, const std::string& label) {
    if (world_ != nullptr) {
      // Every rank slices rank 0's full weights, as one process would hold them.
      torch::NoGradGuard no_grad;
      detail::broadcast_from_root(*world_, module.parameters());
      detail::broadcast_from_root(*world_, module.buffers());
    }
    if (tensor_ != nullptr) {
      placements_.note_full_shapes(module);
      const std::vector<SplitParameter> split =
          split_tensor_parallel_layers(module, *tensor_, label);
      placements_.note_split(module, split, tensor_->rank(), N, composed_name, label);
    }
    Base::prepare_model(module, label);
  }

  // The checkpoint-slice role (contract.hpp) in the full tensors' numbering. `rank` is the
  // world's; the outer strategy answers for this rank's place in the data-parallel group.
  std::vector<std::int64_t> parameter_shape(const torch::Tensor& parameter) const {
    if (const auto* split = placements_.find(parameter)) return split->full_shape;
    return Base::parameter_shape(parameter);
  }
  // The split parameter's full shape, dimension split and placement (the manifest records the
  // dimension); null for a parameter every rank of a group holds whole.
  const TensorParallelPlacements::Split* tensor_parallel_split(const torch::Tensor& p) const {
    return placements_.find(p);
  }
  std::optional<ParameterSlice> saved_slice(const torch::Tensor& parameter, int rank) const {
    if (tensor_ == nullptr) return Base::saved_slice(parameter, rank);
    const auto* split = placements_.find(parameter);
    if (split == nullptr && rank % N != 0) return std::nullopt;  // the group's first rank has it
    auto slice = Base::saved_slice(parameter, rank / N);
    if (slice && split != nullptr) slice->placement = split->placement;
    return slice;
  }
  std::optional<ParameterSlice> loaded_slice(const torch::Tensor& parameter) const {
    auto slice = Base::loaded_slice(parameter);
    if (const auto* split = placements_.find(parameter); slice && split != nullptr)
      slice->placement = split->placement;
    return slice;
  }
  std::vector<StateSlot> state_slots(torch::optim::Optimizer& user, bool saving, int rank) {
    if (tensor_ == nullptr) return Base::state_slots(user, saving, rank);
    std::vector<StateSlot> slots;
    for (auto& slot : Base::state_slots(user, saving, rank / N)) {
      const auto* split =
          placements_.find(user.param_groups().at(slot.group).params().at(slot.index));
      if (split == nullptr && saving && rank % N != 0) continue;
      if (split != nullptr) slot.placement = split->placement;
      slots.push_back(std::move(slot));
    }
    return slots;
  }

  // What clip_grad_norm measures and scales: the outer strategy's gradients of the split
  // parameters, then of the others. Those of the first kind are noted for norm_share: a sharded
  // strategy hands over pieces of its shard gradients, which are not any parameter's .grad.
  std::vector<torch::Tensor> gradients_to_clip(const std::vector<torch::Tensor>& parameters) const {
    if (tensor_ == nullptr) return Base::gradients_to_clip(parameters);
    std::vector<torch::Tensor> split, replicated;
    for (const auto& p : parameters)
      (placements_.find(p) != nullptr ? split : replicated).push_back(p);
    std::vector<torch::Tensor> grads = Base::gradients_to_clip(split);
    split_gradients_.clear();
    for (const auto& g : grads) split_gradients_.insert(g.unsafeGetTensorImpl());
    for (auto& g : Base::gradients_to_clip(replicated)) grads.push_back(std::move(g));
    return grads;
  }

  // clip_grad_norm (detail/clip.hpp): the share of a gradient's |g|^p this rank adds before
  // reduce_norm sums over the data-parallel group (the outer strategy's, where it sums) and the
  // tensor-parallel group: all of a slice's, 1/N of a replicated one's.
  double norm_share(const torch::Tensor& gradient) const {
    if (tensor_ == nullptr) return 1.0;
    return split_gradients_.count(gradient.unsafeGetTensorImpl()) != 0 ? 1.0 : 1.0 / N;
  }
  torch::Tensor reduce_norm(torch::Tensor local, bool is_max) {
    local = Base::reduce_norm(std::move(local), is_max);
    if (tensor_ != nullptr)
      tensor_->allreduce(local, is_max ? runtime::ReduceOp::max : runtime::ReduceOp::sum);
    return local;
  }

  void gather_full(torch::nn::Module& module) {
    Base::gather_full(module);
    gather_tensor_parallel_layers(module);
  }
  void release_full(torch::nn::Module& module) {
    release_tensor_parallel_layers(module);
    Base::release_full(module);
  }

  // The ranks this rank's layers are split across (null on one process and at
  // TensorParallel<1>).
  const runtime::ProcessGroup* tensor_parallel_group() const { return tensor_.get(); }

 private:
  runtime::ProcessGroup* world_ = nullptr;
  std::unique_ptr<runtime::ProcessGroup> tensor_, data_;
  // The parameters each rank of a group holds part of (the prepared models' own tensors, which
  // live as long as the Accelerator uses them), and where each lies in its full tensor.
  TensorParallelPlacements placements_;
  // The split parameters' gradients the last gradients_to_clip handed over.
  mutable std::unordered_set<const void*> split_gradients_;
};

}  // namespace accel::parallel
