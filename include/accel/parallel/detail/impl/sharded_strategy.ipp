// ShardedStrategy's members that do not depend on the optimizer's type (sharded_strategy.hpp
// includes this file in header-only mode). With ACCEL_SEPARATE_COMPILATION, accel's separately
// compiled part instantiates them for both strategies, once: impl/zero2.ipp and impl/zero3.ipp
// hold the explicit instantiations, and zero2.hpp and zero3.hpp declare them extern.
// About 400 lines: the members of one class template (detail/sharded_strategy.hpp), kept
// together until the sharded strategies are split by role (shard optimizers, flat parameters
// and their hooks, reduce-scatter).
#pragma once

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <algorithm>
#include <unordered_set>

#include "../../../detail/shape_text.hpp"
#include "../broadcast.hpp"
#include "../sharded_strategy.hpp"

namespace accel::parallel::detail {

template <class Derived>
void ShardedStrategy<Derived>::attach(runtime::ProcessGroup* process_group,
                                      const Options& options) {
  group_ = process_group;
  shard_group_ = process_group;
  offload_ = options.offload;
  fused_optimizer_ = options.fused_optimizer;
  if (offload_.parameters && group_ == nullptr)
    accel::detail::fail("{}: Options::offload.parameters keeps this rank's parameter shards on "
                        "the CPU, and on one process nothing is sharded (the model stays whole "
                        "on its device); set offload.optimizer instead to keep the optimizer "
                        "state and its step on the CPU, or run 2 or more processes",
                        name_);
}

template <class Derived>
std::vector<torch::Tensor> ShardedStrategy<Derived>::gradients_to_clip(
    const std::vector<torch::Tensor>& parameters) const {
  if (group_ == nullptr || !sharded_) return ReplicatedGradients::gradients_to_clip(parameters);
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    const auto found = where_.find(p.unsafeGetTensorImpl());
    if (found != where_.end()) {
      FlatParameter& flat = *flats_[found->second.flat];
      const auto* piece = flat.piece_of(found->second.index);
      if (piece == nullptr) continue;
      flat.shard_gradient();  // zeros where no gradient reached it yet
      grads.push_back(piece->data.grad());
    } else if (p.grad().defined() && shard_group_->rank() == 0) {
      // Not sharded (not in a prepared model): counted once, on the shard group's rank 0, for
      // the sum and the maximum alike.
      grads.push_back(p.grad());
    }
  }
  return grads;
}

template <class Derived>
std::vector<torch::Tensor> ShardedStrategy<Derived>::gradients_of(
    const torch::optim::Optimizer& optimizer) {
  ShardedOptimizer* sharded = find(optimizer);
  if (group_ == nullptr || !sharded_ || sharded == nullptr)
    return ReplicatedGradients::gradients_of(optimizer);
  std::vector<torch::Tensor> grads;
  for (const std::size_t f : index_pieces(*sharded, optimizer).flats) flats_[f]->shard_gradient();
  for (const auto& pieces : sharded->pieces)
    for (const auto& piece : pieces) grads.push_back(piece.grad());
  return grads;
}

template <class Derived>
torch::Tensor ShardedStrategy<Derived>::reduce_norm(torch::Tensor local, bool is_max) {
  if (group_ == nullptr || !sharded_) return local;
  torch::Tensor combined = local.reshape({1}).clone();  // Gloo takes one-element tensors
  shard_group_->allreduce(combined, is_max ? runtime::ReduceOp::max : runtime::ReduceOp::sum);
  return combined;
}

template <class Derived>
const torch::optim::Optimizer* ShardedStrategy<Derived>::shard_optimizer(
    const torch::optim::Optimizer& user) const {
  for (const auto& sharded : optimizers_)
    if (sharded.user == &user) return sharded.shard.get();
  return nullptr;
}

template <class Derived>
void ShardedStrategy<Derived>::count_memory(state::MemoryCounter& counter) const {
  for (const auto& flat : flats_) {
    if (offload_.parameters) {
      counter.offloaded(flat->shard());
      counter.offloaded(flat->allocated_shard_gradient());
    }
    counter.parameter(flat->shard());
    counter.parameter(flat->flat());  // 0 bytes while a Zero3 unit is not gathered
    counter.gradient(flat->allocated_shard_gradient());  // none before it is first needed
    counter.gradient(flat->gradient());
  }
  for (const auto& sharded : optimizers_) {
    for (const auto& copies : sharded.host)
      for (const auto& copy : copies) {
        counter.offloaded(copy);
        counter.offloaded(copy.grad());
      }
    if (sharded.shard) counter.optimizer_state(*sharded.shard, offload_.any());
  }
}

template <class Derived>
bool ShardedStrategy<Derived>::is_flattened(const torch::Tensor& parameter) const {
  return where_.count(parameter.unsafeGetTensorImpl()) != 0;
}

template <class Derived>
std::vector<std::int64_t> ShardedStrategy<Derived>::parameter_shape(
    const torch::Tensor& parameter) const {
  const auto found = where_.find(parameter.unsafeGetTensorImpl());
  if (found == where_.end()) return parameter.sizes().vec();
  return flats_[found->second.flat]->shape(found->second.index);
}

template <class Derived>
std::optional<ParameterSlice> ShardedStrategy<Derived>::saved_slice(
    const torch::Tensor& parameter, int rank) const {
  const auto found = where_.find(parameter.unsafeGetTensorImpl());
  if (group_ == nullptr || found == where_.end())
    return ReplicatedCheckpoint::saved_slice(parameter, rank);
  if (!saves_shards()) return std::nullopt;
  return this_ranks_piece(found->second);
}

template <class Derived>
std::optional<ParameterSlice> ShardedStrategy<Derived>::loaded_slice(
    const torch::Tensor& parameter) const {
  const auto found = where_.find(parameter.unsafeGetTensorImpl());
  if (group_ == nullptr || found == where_.end() ||
      flats_[found->second.flat]->residency() == Residency::replicated)
    return ReplicatedCheckpoint::loaded_slice(parameter);
  return this_ranks_piece(found->second);
}

template <class Derived>
std::vector<StateSlot> ShardedStrategy<Derived>::state_slots(torch::optim::Optimizer& user,
                                                             bool saving, int rank) {
  ShardedOptimizer* found = find(user);  // on one process only under offload.optimizer
  if (found == nullptr) return ReplicatedCheckpoint::state_slots(user, saving, rank);
  ShardedOptimizer& sharded = found->build(*this, user);
  std::vector<StateSlot> slots;
  if (saving && !saves_shards()) return slots;
  auto& shard_groups = sharded.shard->param_groups();
  for (std::size_t g = 0; g < sharded.pieces.size(); ++g)
    for (std::size_t j = 0; j < sharded.pieces[g].size(); ++j) {
      const torch::Tensor& piece = shard_groups[g].params()[j];
      slots.push_back({sharded.shard.get(), piece, g, sharded.piece_of[g][j].index,
                       sharded.piece_of[g][j].begin, piece.numel()});
    }
  return slots;
}

template <class Derived>
std::vector<torch::Tensor> ShardedStrategy<Derived>::flat_gradients() const {
  std::vector<torch::Tensor> gradients;
  for (const auto& flat : flats_) gradients.push_back(flat->gradient());
  return gradients;
}

template <class Derived>
void ShardedStrategy<Derived>::restore_flat_gradients(const std::vector<torch::Tensor>& gradients) {
  torch::NoGradGuard no_grad;
  for (std::size_t f = 0; f < flats_.size() && f < gradients.size(); ++f) {
    if (!gradients[f].defined()) continue;
    flats_[f]->attach_gradients();
    flats_[f]->gradient().copy_(gradients[f]);
    pending_[f] = 1;
  }
}

template <class Derived>
void ShardedStrategy<Derived>::after_state_loaded() {
  for (auto& flat : flats_)
    if (flat->residency() == Residency::sharded) flat->to_rest();
  copy_pieces_to_host();
}

template <class Derived>
void ShardedStrategy<Derived>::copy_pieces_to_host() {
  torch::NoGradGuard no_grad;
  for (auto& sharded : optimizers_)
    for (std::size_t g = 0; g < sharded.host.size(); ++g)
      for (std::size_t j = 0; j < sharded.host[g].size(); ++j)
        sharded.host[g][j].copy_(sharded.pieces[g][j]);
}

template <class Derived>
void ShardedStrategy<Derived>::begin_prepare(torch::nn::Module& module, const std::string& label,
                                             bool broadcast) {
  for (const auto& sharded : optimizers_)
    if (sharded.shard)
      accel::detail::fail("{}: {} is prepared after an optimizer stepped; the optimizer's shards "
                          "were built from the models prepared then; prepare every model before "
                          "the first optimizer step",
                          name_, label);
  for (auto& sharded : optimizers_) sharded.indexed = false;  // may now find its parameters
  if (!broadcast) return;
  torch::NoGradGuard no_grad;
  broadcast_from_root(*group_, module.parameters());
  broadcast_from_root(*group_, module.buffers());
}

template <class Derived>
std::vector<std::size_t> ShardedStrategy<Derived>::flatten(
    const std::vector<std::pair<std::string, torch::Tensor>>& named, const std::string& label,
    Residency residency) {
  struct SameKind {
    c10::ScalarType dtype;
    torch::Device device;
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
  };
  std::vector<SameKind> kinds;
  std::unordered_set<const void*> seen;
  for (const auto& [name, p] : named) {
    if (is_flattened(p) || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    if (!p.requires_grad()) {
      frozen_.push_back({p, name, label});
      continue;
    }
    auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const SameKind& k) {
      return k.dtype == p.scalar_type() && k.device == p.device();
    });
    if (kind == kinds.end())
      kind = kinds.insert(kinds.end(), SameKind{p.scalar_type(), p.device(), {}, {}});
    kind->params.push_back(p);
    kind->names.push_back(name);
  }
  std::vector<std::size_t> made;
  for (auto& kind : kinds) {
    const std::size_t f = flats_.size();
    flats_.push_back(std::make_unique<FlatParameter>(std::move(kind.params),
                                                     std::move(kind.names), shard_group_->size(),
                                                     shard_group_->rank(), residency,
                                                     build_device_));
    if (offload_.parameters) flats_.back()->keep_shard_on_host();
    labels_.push_back(label);
    pending_.push_back(0);
    const auto& params = flats_.back()->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      where_[params[i].unsafeGetTensorImpl()] = {f, i};
      install_hook(params[i], f, i);
    }
    made.push_back(f);
  }
  return made;
}

template <class Derived>
void ShardedStrategy<Derived>::reduce_scatter_gradient(std::size_t f) {
  if (pending_[f] != 0) {
    runtime::ProcessGroup::PendingCollective sent = start_reduce_scatter(f);
    sent.wait();
    add_to_shard(f, sent.result);
  }
  flats_[f]->release_gradients();
}

template <class Derived>
runtime::ProcessGroup::PendingCollective ShardedStrategy<Derived>::start_reduce_scatter(
    std::size_t f) {
  FlatParameter& flat = *flats_[f];
  const std::int64_t shard = flat.layout().shard_numel;
  return shard_group_->reduce_scatter_async(flat.gradient(), runtime::ReduceOp::mean,
                                            flat.gradient().narrow(0, flat.rank() * shard, shard));
}

template <class Derived>
void ShardedStrategy<Derived>::add_to_shard(std::size_t f, torch::Tensor averaged) {
  if (replica_group_ != nullptr) replica_group_->allreduce(averaged, runtime::ReduceOp::mean);
  torch::NoGradGuard no_grad;
  torch::Tensor& shard_gradient = flats_[f]->shard_gradient();  // on the CPU: offload.parameters
  shard_gradient.add_(averaged.to(shard_gradient.device()));
  pending_[f] = 0;
}

template <class Derived>
void ShardedStrategy<Derived>::begin_backward(bool sync) {
  check_still_trainable();
  if (!sync) sharded_ = false;
}

template <class Derived>
void ShardedStrategy<Derived>::check_still_trainable() const {
  for (std::size_t f = 0; f < flats_.size(); ++f) {
    const auto& params = flats_[f]->parameters();
    for (std::size_t i = 0; i < params.size(); ++i)
      if (!params[i].requires_grad())
        fail_trainability(flats_[f]->names()[i], labels_[f], "frozen");
  }
  for (const auto& frozen : frozen_)
    if (frozen.parameter.requires_grad()) fail_trainability(frozen.name, frozen.model, "unfrozen");
}

template <class Derived>
std::optional<ParameterSlice> ShardedStrategy<Derived>::this_ranks_piece(
    const Location& location) const {
  const auto* piece = flats_[location.flat]->piece_of(location.index);
  if (piece == nullptr) return std::nullopt;
  return ParameterSlice{piece->begin, piece->data.detach()};
}

template <class Derived>
std::size_t ShardedStrategy<Derived>::count_parameters(const torch::optim::Optimizer& optimizer) {
  std::size_t count = 0;
  for (const auto& group : optimizer.param_groups()) count += group.params().size();
  return count;
}

template <class Derived>
void ShardedStrategy<Derived>::step_shard_optimizer(ShardedOptimizer& sharded) {
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
  step_optimizer(*sharded.shard, fused_optimizer_);
  for (std::size_t g = 0; g < sharded.host.size(); ++g)
    for (std::size_t j = 0; j < sharded.host[g].size(); ++j)
      sharded.pieces[g][j].copy_(sharded.host[g][j]);
}

template <class Derived>
typename ShardedStrategy<Derived>::ShardedOptimizer* ShardedStrategy<Derived>::find(
    const torch::optim::Optimizer& user) {
  for (auto& sharded : optimizers_)
    if (sharded.user == &user) return &sharded;
  return nullptr;
}

template <class Derived>
typename ShardedStrategy<Derived>::ShardedOptimizer& ShardedStrategy<Derived>::index_pieces(
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
      const auto found = where_.find(params[k].unsafeGetTensorImpl());
      if (found == where_.end()) {
        // Frozen at prepare: no gradient, so the user's optimizer would skip it too.
        if (!params[k].requires_grad()) continue;
        accel::detail::fail("{}: parameter #{} of param group {} of the optimizer (shape [{}]) "
                            "belongs to no prepared model, so it has no shard; prepare() the "
                            "model that owns it, before the first step",
                            name_, k, g, accel::detail::shape_text(params[k].sizes()));
      }
      const auto [f, i] = found->second;
      if (std::find(sharded->flats.begin(), sharded->flats.end(), f) == sharded->flats.end())
        sharded->flats.push_back(f);
      if (const auto* piece = flats_[f]->piece_of(i)) {
        sharded->pieces[g].push_back(piece->data);
        sharded->piece_of[g].push_back({k, piece->begin});
      }
    }
  }
  std::sort(sharded->flats.begin(), sharded->flats.end());
  sharded->parameters = count_parameters(user);
  sharded->indexed = true;
  return *sharded;
}

template <class Derived>
void ShardedStrategy<Derived>::install_hook(const torch::Tensor& parameter, std::size_t f,
                                            std::size_t i) {
  // The tensor holds its accumulator weakly: keep it, or the hook silently never fires.
  auto accumulator = torch::autograd::impl::grad_accumulator(parameter);
  accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [this, f, i](const torch::autograd::variable_list& outputs,
                   const torch::autograd::variable_list& /*inputs*/) {
        pending_[f] = 1;
        derived().gradient_arrived(f, i);
        return outputs;
      }));
  accumulators_.push_back(std::move(accumulator));
}

template <class Derived>
void ShardedStrategy<Derived>::fail_trainability(const std::string& parameter,
                                                 const std::string& model,
                                                 std::string_view change) const {
  accel::detail::fail("{}: parameter '{}' of {} was {} after prepare(); the flat parameters and "
                      "their shards are laid out at prepare(), so set requires_grad before "
                      "preparing the model (prepare it again in a new Accelerator to change "
                      "which parameters train)",
                      name_, parameter, model, change);
}

}  // namespace accel::parallel::detail
