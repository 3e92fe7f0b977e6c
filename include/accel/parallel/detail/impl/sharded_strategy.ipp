// ShardedStrategy's members that do not depend on the optimizer's type (sharded_strategy.hpp
// includes this file in header-only mode; with ACCEL_SEPARATE_COMPILATION accel's separately
// compiled part compiles them once, through impl/src.hpp). The parts it composes are compiled in
// their own files (flat_parameter_set.ipp, shard_optimizers.ipp, gradient_reduce_scatter.ipp).
#pragma once

#include "../../../detail/error.hpp"
#include "../broadcast.hpp"
#include "../sharded_communication.hpp"
#include "../sharded_strategy.hpp"

namespace accel::parallel::detail {

ACCEL_DECL void ShardedStrategy::attach(runtime::ProcessGroup* process_group,
                                      const Options& options) {
  group_ = process_group;
  shard_within(process_group, nullptr);
  flats_.keep_shards_on_host(options.offload.parameters);
  optimizers_.configure(process_group, options.offload, options.fused_optimizer);
  check_sharded_communication(name_, options.sharded_communication);
  reduce_scatter_.send_in(options.sharded_communication.gradients, name_);
  if (options.offload.parameters && group_ == nullptr)
    accel::detail::fail("{}: Options::offload.parameters keeps this rank's parameter shards on "
                        "the CPU, and on one process nothing is sharded (the model stays whole "
                        "on its device); set offload.optimizer instead to keep the optimizer "
                        "state and its step on the CPU, or run 2 or more processes",
                        name_);
}

ACCEL_DECL void ShardedStrategy::shard_within(runtime::ProcessGroup* shards,
                                            runtime::ProcessGroup* replicas) {
  shard_group_ = shards;
  replica_group_ = replicas;
  flats_.cut_across(shards);
  reduce_scatter_.use_groups(shards, replicas);
}

ACCEL_DECL std::vector<torch::Tensor> ShardedStrategy::gradients_to_clip(
    const std::vector<torch::Tensor>& parameters) const {
  if (group_ == nullptr || !reduce_scatter_.in_shards())
    return ReplicatedGradients::gradients_to_clip(parameters);
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (const FlatParameterSet::Location* location = flats_.find(p)) {
      if (std::optional<torch::Tensor> gradient = flats_.piece_gradient(*location))
        grads.push_back(*gradient);
    } else if (p.grad().defined() && shard_group_->rank() == 0) {
      // Not sharded (not in a prepared model): counted once, on the shard group's rank 0, for
      // the sum and the maximum alike.
      grads.push_back(p.grad());
    }
  }
  return grads;
}

ACCEL_DECL std::vector<torch::Tensor> ShardedStrategy::gradients_of(
    const torch::optim::Optimizer& optimizer) {
  ShardOptimizers::ShardedOptimizer* sharded = optimizers_.find(optimizer);
  if (group_ == nullptr || !reduce_scatter_.in_shards() || sharded == nullptr)
    return ReplicatedGradients::gradients_of(optimizer);
  return optimizers_.piece_gradients(*sharded, optimizer);
}

ACCEL_DECL std::vector<std::int64_t> ShardedStrategy::parameter_shape(
    const torch::Tensor& parameter) const {
  const FlatParameterSet::Location* location = flats_.find(parameter);
  if (location == nullptr) return parameter.sizes().vec();
  return flats_[location->flat].shape(location->index);
}

ACCEL_DECL std::optional<ParameterSlice> ShardedStrategy::saved_slice(
    const torch::Tensor& parameter, int rank) const {
  const FlatParameterSet::Location* location = flats_.find(parameter);
  if (group_ == nullptr || location == nullptr)
    return ReplicatedCheckpoint::saved_slice(parameter, rank);
  if (!saves_shards()) return std::nullopt;
  return flats_.this_ranks_piece(*location);
}

ACCEL_DECL std::optional<ParameterSlice> ShardedStrategy::loaded_slice(
    const torch::Tensor& parameter) const {
  const FlatParameterSet::Location* location = flats_.find(parameter);
  if (group_ == nullptr || location == nullptr ||
      flats_[location->flat].residency() == Residency::replicated)
    return ReplicatedCheckpoint::loaded_slice(parameter);
  return flats_.this_ranks_piece(*location);
}

ACCEL_DECL std::vector<StateSlot> ShardedStrategy::state_slots(torch::optim::Optimizer& user,
                                                             bool saving, int rank) {
  // On one process only under offload.optimizer.
  ShardOptimizers::ShardedOptimizer* found = optimizers_.find(user);
  if (found == nullptr) return ReplicatedCheckpoint::state_slots(user, saving, rank);
  return optimizers_.state_slots(*found, user, /*listed=*/!saving || saves_shards());
}

ACCEL_DECL void ShardedStrategy::after_state_loaded() {
  for (const auto& flat : flats_.all())
    if (flat->residency() == Residency::sharded) flat->to_rest();
  optimizers_.copy_pieces_to_host();
}

ACCEL_DECL void ShardedStrategy::begin_prepare(torch::nn::Module& module, const std::string& label,
                                             bool broadcast) {
  optimizers_.before_model_prepared(label);
  if (!broadcast) return;
  torch::NoGradGuard no_grad;
  broadcast_from_root(*group_, module.parameters());
  broadcast_from_root(*group_, module.buffers());
}

ACCEL_DECL void ShardedStrategy::begin_backward(bool sync) {
  flats_.check_still_trainable();
  if (!sync) reduce_scatter_.set_in_shards(false);
}

}  // namespace accel::parallel::detail
