// ShardOptimizers' members that do not depend on the optimizer's type (shard_optimizers.hpp
// includes this file in header-only mode).
#pragma once

#include <algorithm>

#include "../../../detail/shape_text.hpp"
#include "../shard_optimizers.hpp"

namespace accel::parallel::detail {

ACCEL_DECL ShardOptimizers::ShardedOptimizer* ShardOptimizers::find(
    const torch::optim::Optimizer& user) {
  for (auto& sharded : optimizers_)
    if (sharded.user == &user) return &sharded;
  return nullptr;
}

ACCEL_DECL const torch::optim::Optimizer* ShardOptimizers::shard_of(
    const torch::optim::Optimizer& user) const {
  for (const auto& sharded : optimizers_)
    if (sharded.user == &user) return sharded.shard.get();
  return nullptr;
}

ACCEL_DECL std::vector<torch::Tensor> ShardOptimizers::piece_gradients(
    ShardedOptimizer& found, const torch::optim::Optimizer& user) {
  std::vector<torch::Tensor> grads;
  for (const std::size_t f : index_pieces(found, user).flats) flats_[f].shard_gradient();
  for (const auto& pieces : found.pieces)
    for (const auto& piece : pieces) grads.push_back(piece.grad());
  return grads;
}

ACCEL_DECL std::vector<StateSlot> ShardOptimizers::state_slots(ShardedOptimizer& found,
                                                               torch::optim::Optimizer& user,
                                                               bool listed) {
  ShardedOptimizer& sharded = found.build(*this, user);
  std::vector<StateSlot> slots;
  if (!listed) return slots;
  auto& shard_groups = sharded.shard->param_groups();
  for (std::size_t g = 0; g < sharded.pieces.size(); ++g)
    for (std::size_t j = 0; j < sharded.pieces[g].size(); ++j) {
      const torch::Tensor& piece = shard_groups[g].params()[j];
      slots.push_back({sharded.shard.get(), piece, g, sharded.piece_of[g][j].index,
                       sharded.piece_of[g][j].begin, piece.numel()});
    }
  return slots;
}

ACCEL_DECL void ShardOptimizers::before_model_prepared(const std::string& label) {
  for (const auto& sharded : optimizers_)
    if (sharded.shard)
      accel::detail::fail("{}: {} is prepared after an optimizer stepped; the optimizer's shards "
                          "were built from the models prepared then; prepare every model before "
                          "the first optimizer step",
                          name_, label);
  for (auto& sharded : optimizers_) sharded.indexed = false;  // may now find its parameters
}

ACCEL_DECL void ShardOptimizers::copy_pieces_to_host() {
  torch::NoGradGuard no_grad;
  for (auto& sharded : optimizers_)
    for (std::size_t g = 0; g < sharded.host.size(); ++g)
      for (std::size_t j = 0; j < sharded.host[g].size(); ++j)
        sharded.host[g][j].copy_(sharded.pieces[g][j]);
}

ACCEL_DECL void ShardOptimizers::count_memory(state::MemoryCounter& counter) const {
  for (const auto& sharded : optimizers_) {
    for (const auto& copies : sharded.host)
      for (const auto& copy : copies) {
        counter.offloaded(copy);
        counter.offloaded(copy.grad());
      }
    if (sharded.shard) counter.optimizer_state(*sharded.shard, offload_.any());
  }
}

ACCEL_DECL std::size_t ShardOptimizers::count_parameters(const torch::optim::Optimizer& optimizer) {
  std::size_t count = 0;
  for (const auto& group : optimizer.param_groups()) count += group.params().size();
  return count;
}

ACCEL_DECL void ShardOptimizers::step_shard_optimizer(ShardedOptimizer& sharded) {
  torch::NoGradGuard no_grad;
  for (std::size_t g = 0; g < sharded.host.size(); ++g)
    for (std::size_t j = 0; j < sharded.host[g].size(); ++j) {
      const torch::Tensor& gradient = sharded.pieces[g][j].grad();
      torch::Tensor& copy = sharded.host[g][j];
      if (!gradient.defined()) {
        copy.mutable_grad() = torch::Tensor();
        continue;
      }
      if (!copy.grad().defined()) copy.mutable_grad() = torch::empty_like(copy);
      copy.mutable_grad().copy_(gradient);
    }
  step_optimizer(*sharded.shard, fused_);
  for (std::size_t g = 0; g < sharded.host.size(); ++g)
    for (std::size_t j = 0; j < sharded.host[g].size(); ++j)
      sharded.pieces[g][j].copy_(sharded.host[g][j]);
}

ACCEL_DECL std::vector<torch::Tensor> ShardOptimizers::withhold_gradients_never_produced(
    ShardedOptimizer& sharded) {
  std::vector<torch::Tensor> withheld;
  // On one process the pieces are the parameters themselves, with their own .grad.
  if (group_ == nullptr || flats_.all_had_gradients()) return withheld;
  for (std::size_t g = 0; g < sharded.pieces.size(); ++g)
    for (std::size_t j = 0; j < sharded.pieces[g].size(); ++j) {
      const auto [f, i] = sharded.piece_of[g][j].location;
      torch::Tensor& piece = sharded.pieces[g][j];
      if (flats_.had_gradient(f, i)) {
        withheld.emplace_back();
        continue;
      }
      withheld.push_back(piece.grad());
      piece.mutable_grad() = torch::Tensor();
    }
  return withheld;
}

ACCEL_DECL void ShardOptimizers::give_back_gradients(ShardedOptimizer& sharded,
                                                     const std::vector<torch::Tensor>& withheld) {
  if (withheld.empty()) return;
  std::size_t k = 0;
  for (auto& pieces : sharded.pieces)
    for (auto& piece : pieces)
      if (const torch::Tensor& gradient = withheld[k++]; gradient.defined())
        piece.mutable_grad() = gradient;
}

ACCEL_DECL ShardOptimizers::ShardedOptimizer& ShardOptimizers::index_pieces(
    ShardedOptimizer& found, const torch::optim::Optimizer& user) {
  ShardedOptimizer* sharded = &found;
  if (sharded->indexed) return *sharded;
  const auto& groups = user.param_groups();
  sharded->flats.clear();
  sharded->pieces.assign(groups.size(), {});
  sharded->piece_of.assign(groups.size(), {});
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (std::size_t k = 0; k < params.size(); ++k) {
      if (group_ == nullptr) {  // one process, offload.optimizer: each parameter its own piece
        sharded->pieces[g].push_back(params[k]);
        sharded->piece_of[g].push_back({k, 0});
        continue;
      }
      const FlatParameterSet::Location* location = flats_.find(params[k]);
      if (location == nullptr) {
        // Frozen at prepare: no gradient, so the user's optimizer would skip it too.
        if (!params[k].requires_grad()) continue;
        accel::detail::fail("{}: parameter #{} of param group {} of the optimizer (shape [{}]) "
                            "belongs to no prepared model, so it has no shard; prepare() the "
                            "model that owns it, before the first step",
                            name_, k, g, accel::detail::shape_text(params[k].sizes()));
      }
      const auto [f, i] = *location;
      if (std::find(sharded->flats.begin(), sharded->flats.end(), f) == sharded->flats.end())
        sharded->flats.push_back(f);
      if (const auto* piece = flats_[f].piece_of(i)) {
        sharded->pieces[g].push_back(piece->data);
        sharded->piece_of[g].push_back({k, piece->begin, *location});
      }
    }
  }
  std::sort(sharded->flats.begin(), sharded->flats.end());
  sharded->parameters = count_parameters(user);
  sharded->indexed = true;
  return *sharded;
}

}  // namespace accel::parallel::detail
