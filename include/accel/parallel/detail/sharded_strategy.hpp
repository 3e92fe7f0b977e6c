// What the sharded strategies (Zero2, Zero3 and their Fsdp names) share, composed of three
// parts, each with its own header:
//
//   flats_            flat_parameter_set.hpp: the flat parameters, where each parameter went,
//                     the frozen ones, and the hooks on the gradient accumulators, which tell
//                     Derived::gradient_arrived(f, i).
//   optimizers_       shard_optimizers.hpp: an optimizer of the user's type over this rank's
//                     pieces of the shards, built at the first step, stepped in place of the
//                     user's (on CPU copies under Options::offload.optimizer); after each step
//                     Derived::after_shard_step(flats) (Zero2 all-gathers the updated shards;
//                     Zero3 leaves them sharded until the next forward).
//   reduce_scatter_   gradient_reduce_scatter.hpp: full gradients into this rank's shard
//                     gradients (and across the nodes under Fsdp<HybridShard>), and where the
//                     window's gradients are.
//
// This class holds what joins them: the process groups (every rank, the ranks the shards split
// across, the replicas on other nodes), the start of each prepare() and backward, and the
// contract's roles answered from the parts together.
//
// Derived (CRTP, no virtual dispatch) provides gradient_arrived(std::size_t flat, std::size_t index)
// and after_shard_step(const std::vector<std::size_t>& flats), and drives the parts through
// their public members.
//
// Of the strategy contract (../contract.hpp) this writes the gradient-access and checkpoint-slice
// roles whole, the optimizer half of the training step and the memory counting; Derived writes
// the rest of the training step and gather_full / release_full. Where nothing is sharded (one
// process, frozen parameters) it calls the replicated roles by name (../replicated.hpp).
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
// impl/sharded_strategy.ipp; with ACCEL_SEPARATE_COMPILATION the ShardedStrategy of each Derived
// is compiled once, in accel's separately compiled part (../impl/zero2.ipp, ../impl/zero3.ipp),
// and a program's translation units only call them.
template <class Derived>
class ShardedStrategy {
 public:
  // name: the policy, as errors call it ("Zero2", "Fsdp<FullShard>").
  explicit ShardedStrategy(std::string_view name)
      : name_(name),
        flats_(name, [this](std::size_t f, std::size_t i) { derived().gradient_arrived(f, i); }),
        optimizers_(name, flats_),
        reduce_scatter_(flats_) {}
  ShardedStrategy(const ShardedStrategy&) = delete;
  ShardedStrategy& operator=(const ShardedStrategy&) = delete;

  void attach(runtime::ProcessGroup* process_group, const Options& options);

  // Strategies without shards (Ddp) refuse Options::offload.
  static constexpr bool can_offload = true;

  template <class Optimizer>
  void prepare_optimizer(Optimizer& optimizer) {
    optimizers_.add(optimizer);
  }

  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    if constexpr (ShardableOptimizer<Optimizer>::value)
      if (const std::vector<std::size_t>* stepped = optimizers_.step(optimizer))
        derived().after_shard_step(*stepped);
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
  std::vector<torch::Tensor> gradients_to_clip(const std::vector<torch::Tensor>& parameters) const;

  // What `optimizer` steps with on this rank, for loss scaling to unscale and check: once a
  // window's gradients are reduce-scattered, its pieces' shard gradients (every rank checks its
  // own shard; the ranks then combine what they found); before, the full local gradients.
  std::vector<torch::Tensor> gradients_of(const torch::optim::Optimizer& optimizer);

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
  std::vector<std::int64_t> parameter_shape(const torch::Tensor& parameter) const;
  std::optional<ParameterSlice> saved_slice(const torch::Tensor& parameter, int rank) const;
  std::optional<ParameterSlice> loaded_slice(const torch::Tensor& parameter) const;
  // The shard optimizer's slots (building it if it has not stepped yet): saved and loaded by
  // every rank.
  std::vector<StateSlot> state_slots(torch::optim::Optimizer& user, bool saving, int rank);
  std::vector<torch::Tensor> flat_gradients() const { return flats_.full_gradients(); }
  // The gradients collected so far in the window, as saved; they count at its end as if this
  // process had collected them (pending: the reduce-scatter sends them).
  void restore_flat_gradients(const std::vector<torch::Tensor>& gradients) {
    flats_.restore_full_gradients(gradients);
  }
  // Parameters sharded at rest go back to rest: a full copy gathered before the load is stale;
  // so are the optimizer's CPU copies.
  void after_state_loaded();

  // The flat parameters, in preparation order (Zero2: one per prepared model and dtype; Zero3:
  // one per unit and dtype).
  const std::vector<std::unique_ptr<FlatParameter>>& flat_parameters() const {
    return flats_.all();
  }

 protected:
  // Before a model is flattened: its parameters and buffers from rank 0 (unless they come from
  // an empty build, replayed from rank 0's generator state), and no optimizer stepped yet (their
  // shards were cut from the models prepared then).
  void begin_prepare(torch::nn::Module& module, const std::string& label, bool broadcast = true);

  // What every backward starts with: the layout still holds, and a micro-step that does not end
  // its window collects full gradients again, which clip_grad_norm then measures until the
  // window's reduce-scatter.
  void begin_backward(bool sync);

  // The shards split across `shards` rather than every rank, and each shard gradient is then
  // averaged across `replicas` (Fsdp<HybridShard>: a node, and the same local rank on the other
  // nodes). Before any model is prepared.
  void shard_within(runtime::ProcessGroup* shards, runtime::ProcessGroup* replicas);

  std::string_view name_;
  runtime::ProcessGroup* group_ = nullptr;        // every rank: broadcasts, agreements
  runtime::ProcessGroup* shard_group_ = nullptr;  // the ranks the shards split across
  FlatParameterSet flats_;
  ShardOptimizers optimizers_;
  GradientReduceScatter reduce_scatter_;

 private:
  Derived& derived() { return static_cast<Derived&>(*this); }

  // Under Fsdp<HybridShard> a node's copy of the shards is the same as every other node's: one
  // node saves them (the ranks of the first), every rank loads its own.
  bool saves_shards() const { return replica_group_ == nullptr || replica_group_->rank() == 0; }

  runtime::ProcessGroup* replica_group_ = nullptr;  // the same shard on other nodes, or null

};

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/sharded_strategy.ipp"
#endif
