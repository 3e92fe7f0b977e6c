// What the sharded strategies (Zero2, Zero3 and their Fsdp names) share, composed of three
// parts, each with its own header:
//
//   flats_            flat_parameter_set.hpp: the flat parameters, where each parameter went,
//                     the frozen ones, and the hooks on the gradient accumulators, which call
//                     the callable the strategy gave the constructor with (f, i).
//   optimizers_       shard_optimizers.hpp: an optimizer of the user's type over this rank's
//                     pieces of the shards, built at the first step, stepped in place of the
//                     user's (on CPU copies under Options::offload.optimizer); step_shards()
//                     returns the flat parameters it stepped, and the strategy's optimizer_step
//                     goes on from there (Zero2 all-gathers the updated shards; Zero3 leaves them
//                     sharded until the next forward).
//   reduce_scatter_   gradient_reduce_scatter.hpp: full gradients into this rank's shard
//                     gradients (and across the nodes under Fsdp<HybridShard>), and where the
//                     window's gradients are.
//
// This class holds what joins them: the process groups (every rank, the ranks the shards split
// across, the replicas on other nodes), the start of each prepare() and backward, and the
// contract's roles answered from the parts together.
//
// The strategies derive from it and drive it one way: what it needs from them comes in as a
// typed callable (the gradient hook) or goes out as a return value (the flats a step changed),
// so it never calls back into the class that derives from it, and is no template.
//
// Of the strategy contract (../contract.hpp) this writes the gradient-access and checkpoint-slice
// roles whole, the optimizer's preparation and zeroing and the memory counting; the strategy
// writes the rest of the training step (optimizer_step around step_shards()) and gather_full /
// release_full. Where nothing is sharded (one process, frozen parameters) it calls the replicated
// roles by name (../replicated.hpp).
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../../detail/separate_compilation.hpp"
#include "../../options.hpp"
#include "../../runtime/process_group.hpp"
#include "../flat_parameter.hpp"
#include "../replicated.hpp"
#include "flat_parameter_set.hpp"
#include "gradient_reduce_scatter.hpp"
#include "shard_optimizers.hpp"
#include "shardable_optimizer.hpp"

namespace accel::parallel::detail {

// The members that do not depend on the optimizer's type are defined in
// impl/sharded_strategy.ipp (ACCEL_DECL: with ACCEL_SEPARATE_COMPILATION compiled once, in
// accel's separately compiled part); a program's translation units only call them.
class ShardedStrategy {
 public:
  // name: the policy, as errors call it ("Zero2", "Fsdp<FullShard>"). gradient_arrived: called
  // on autograd's thread as parameter i of flat parameter f gets its gradient.
  ShardedStrategy(std::string_view name, FlatParameterSet::GradientArrived gradient_arrived)
      : name_(name),
        flats_(name, std::move(gradient_arrived)),
        optimizers_(name, flats_),
        reduce_scatter_(flats_) {}
  ShardedStrategy(const ShardedStrategy&) = delete;
  ShardedStrategy& operator=(const ShardedStrategy&) = delete;

  ACCEL_DECL void attach(runtime::ProcessGroup* process_group, const Options& options);

  // Strategies without shards (Ddp) refuse Options::offload.
  static constexpr bool can_offload = true;

  template <class Optimizer>
  void prepare_optimizer(Optimizer& optimizer) {
    optimizers_.add(optimizer);
  }


  // In place, as every strategy's: this optimizer's shard gradients, and any full gradient its
  // parameters hold while a window collects.
  template <class Optimizer>
  void zero_grad(Optimizer& optimizer) {
    zero_grad_in_place(optimizer);
    if (group_ == nullptr) return;
    optimizers_.zero_piece_gradients(optimizer);
  }

  // What clip_grad_norm scales: once a window's gradients are reduce-scattered, this rank's
  // shard of them (its pieces of `parameters`); before, the full local gradients, measured only.
  ACCEL_DECL std::vector<torch::Tensor> gradients_to_clip(
      const std::vector<torch::Tensor>& parameters) const;

  // What `optimizer` steps with on this rank, for loss scaling to unscale and check: once a
  // window's gradients are reduce-scattered, its pieces' shard gradients (every rank checks its
  // own shard; the ranks then combine what they found); before, the full local gradients.
  ACCEL_DECL std::vector<torch::Tensor> gradients_of(const torch::optim::Optimizer& optimizer);

  // gradient_reduce_scatter.hpp: summed (or the maximum taken) across the shard group once the
  // gradients are sharded.
  torch::Tensor reduce_norm(torch::Tensor local, bool is_max) {
    return reduce_scatter_.reduce_norm(local, is_max);
  }

  // The optimizer built over this rank's shard for `user` (null before its first step, and on
  // one process): for inspecting what each rank keeps.
  const torch::optim::Optimizer* shard_optimizer(const torch::optim::Optimizer& user) const {
    return optimizers_.shard_of(user);
  }
  // Flat buffers (while they have storage), shards, shard and full gradients, and the shard
  // optimizers' state.
  void count_memory(state::MemoryCounter& counter) const {
    flats_.count_memory(counter);
    optimizers_.count_memory(counter);
  }

  // --- Checkpoint slices (../contract.hpp): each rank writes its pieces of the flattened
  // parameters and their optimizer state; parameters left out of the flat ones (frozen) are
  // replicated, as under Ddp. Replicated residency (Zero2) reads parameters whole, sharded
  // residency (Zero3) only this rank's pieces.
  bool is_flattened(const torch::Tensor& parameter) const { return flats_.is_flattened(parameter); }
  ACCEL_DECL std::vector<std::int64_t> parameter_shape(const torch::Tensor& parameter) const;
  ACCEL_DECL std::optional<ParameterSlice> saved_slice(const torch::Tensor& parameter,
                                                       int rank) const;
  ACCEL_DECL std::optional<ParameterSlice> loaded_slice(const torch::Tensor& parameter) const;
  // The shard optimizer's slots (building it if it has not stepped yet): saved and loaded by
  // every rank.
  ACCEL_DECL std::vector<StateSlot> state_slots(torch::optim::Optimizer& user, bool saving,
                                                int rank);
  std::vector<torch::Tensor> flat_gradients() const { return flats_.full_gradients(); }
  // The gradients collected so far in the window, as saved; they count at its end as if this
  // process had collected them (pending: the reduce-scatter sends them).
  void restore_flat_gradients(const std::vector<torch::Tensor>& gradients) {
    flats_.restore_full_gradients(gradients);
  }
  // Parameters sharded at rest go back to rest: a full copy gathered before the load is stale;
  // so are the optimizer's CPU copies.
  ACCEL_DECL void after_state_loaded();

  // The flat parameters, in preparation order (Zero2: one per prepared model and dtype; Zero3:
  // one per unit and dtype).
  const std::vector<std::unique_ptr<FlatParameter>>& flat_parameters() const {
    return flats_.all();
  }

 protected:
  // Before a model is flattened: its parameters and buffers from rank 0 (unless they come from
  // an empty build, replayed from rank 0's generator state), and no optimizer stepped yet (their
  // shards were cut from the models prepared then).
  ACCEL_DECL void begin_prepare(torch::nn::Module& module, const std::string& label,
                                bool broadcast = true);

  // The optimizer step on this rank's shards (shard_optimizers.hpp): the flat parameters it
  // changed, for the strategy to bring back where they live; null where nothing was stepped
  // here (one process, or an optimizer whose state cannot be sharded, which ran as the user's).
  template <class Optimizer>
  const std::vector<std::size_t>* step_shards(Optimizer& optimizer) {
    if constexpr (ShardableOptimizer<Optimizer>::value)
      return optimizers_.step(optimizer);
    else
      return nullptr;
  }

  // What every backward starts with: the layout still holds, and a micro-step that does not end
  // its window collects full gradients again, which clip_grad_norm then measures until the
  // window's reduce-scatter.
  ACCEL_DECL void begin_backward(bool sync);

  // The shards split across `shards` rather than every rank, and each shard gradient is then
  // averaged across `replicas` (Fsdp<HybridShard>: a node, and the same local rank on the other
  // nodes). Before any model is prepared.
  ACCEL_DECL void shard_within(runtime::ProcessGroup* shards, runtime::ProcessGroup* replicas);

  std::string_view name_;
  runtime::ProcessGroup* group_ = nullptr;        // every rank: broadcasts, agreements
  runtime::ProcessGroup* shard_group_ = nullptr;  // the ranks the shards split across
  FlatParameterSet flats_;
  ShardOptimizers optimizers_;
  GradientReduceScatter reduce_scatter_;

 private:
  // Under Fsdp<HybridShard> a node's copy of the shards is the same as every other node's: one
  // node saves them (the ranks of the first), every rank loads its own.
  bool saves_shards() const { return replica_group_ == nullptr || replica_group_->rank() == 0; }

  runtime::ProcessGroup* replica_group_ = nullptr;  // the same shard on other nodes, or null

};

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/sharded_strategy.ipp"
#endif
