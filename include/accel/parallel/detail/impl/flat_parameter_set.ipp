// FlatParameterSet's members (flat_parameter_set.hpp includes this file in header-only mode).
#pragma once

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <algorithm>
#include <unordered_set>

#include "../../../detail/error.hpp"
#include "../flat_parameter_set.hpp"

namespace accel::parallel::detail {

ACCEL_DECL std::vector<std::size_t> FlatParameterSet::flatten(
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
                                                     std::move(kind.names), shards_->size(),
                                                     shards_->rank(), residency, build_device_));
    if (shards_on_host_) flats_.back()->keep_shard_on_host();
    labels_.push_back(label);
    pending_.push_back(0);
    const auto& params = flats_.back()->parameters();
    produced_.emplace_back(params.size(), 0);
    had_gradient_.emplace_back(params.size(), 0);
    all_had_gradients_ = false;
    for (std::size_t i = 0; i < params.size(); ++i) {
      where_[params[i].unsafeGetTensorImpl()] = {f, i};
      install_hook(params[i], f, i);
    }
    made.push_back(f);
  }
  return made;
}

ACCEL_DECL const FlatParameterSet::Location* FlatParameterSet::find(
    const torch::Tensor& parameter) const {
  const auto found = where_.find(parameter.unsafeGetTensorImpl());
  return found == where_.end() ? nullptr : &found->second;
}

ACCEL_DECL std::optional<ParameterSlice> FlatParameterSet::this_ranks_piece(
    const Location& location) const {
  const auto* piece = flats_[location.flat]->piece_of(location.index);
  if (piece == nullptr) return std::nullopt;
  return ParameterSlice{piece->begin, piece->data.detach()};
}

ACCEL_DECL std::optional<torch::Tensor> FlatParameterSet::piece_gradient(
    const Location& location) const {
  FlatParameter& flat = *flats_[location.flat];
  const auto* piece = flat.piece_of(location.index);
  if (piece == nullptr) return std::nullopt;
  flat.shard_gradient();  // zeros where no gradient reached it yet
  return piece->data.grad();
}

ACCEL_DECL void FlatParameterSet::check_still_trainable() const {
  for (std::size_t f = 0; f < flats_.size(); ++f) {
    const auto& params = flats_[f]->parameters();
    for (std::size_t i = 0; i < params.size(); ++i)
      if (!params[i].requires_grad())
        fail_trainability(flats_[f]->names()[i], labels_[f], "frozen");
  }
  for (const auto& frozen : frozen_)
    if (frozen.parameter.requires_grad()) fail_trainability(frozen.name, frozen.model, "unfrozen");
}

ACCEL_DECL std::vector<torch::Tensor> FlatParameterSet::full_gradients() const {
  std::vector<torch::Tensor> gradients;
  for (const auto& flat : flats_) gradients.push_back(flat->gradient());
  return gradients;
}

ACCEL_DECL void FlatParameterSet::restore_full_gradients(
    const std::vector<torch::Tensor>& gradients) {
  torch::NoGradGuard no_grad;
  for (std::size_t f = 0; f < flats_.size() && f < gradients.size(); ++f) {
    if (!gradients[f].defined()) continue;
    flats_[f]->attach_gradients();
    flats_[f]->gradient().copy_(gradients[f]);
    pending_[f] = 1;
    // Saved mid-window without which parameters produced them: counted as produced, as zeros
    // collected for a parameter are once the window's step has them.
    std::fill(produced_[f].begin(), produced_[f].end(), 1);
  }
}

ACCEL_DECL void FlatParameterSet::agree_on_gradients(runtime::ProcessGroup& group) {
  if (!all_had_gradients_) {
    std::int64_t count = 0;
    for (const auto& flags : produced_) count += static_cast<std::int64_t>(flags.size());
    torch::Tensor any = torch::empty({count}, torch::kInt);
    auto* out = any.data_ptr<int>();
    for (std::size_t f = 0; f < produced_.size(); ++f)
      for (std::size_t i = 0; i < produced_[f].size(); ++i)
        *out++ = (produced_[f][i] | had_gradient_[f][i]) != 0 ? 1 : 0;
    group.allreduce(any, runtime::ReduceOp::max);
    const auto* in = any.data_ptr<int>();
    all_had_gradients_ = true;
    for (auto& flags : had_gradient_)
      for (char& flag : flags) {
        flag = static_cast<char>(*in++ != 0);
        all_had_gradients_ = all_had_gradients_ && flag != 0;
      }
  }
  for (auto& flags : produced_) std::fill(flags.begin(), flags.end(), 0);
}

ACCEL_DECL void FlatParameterSet::count_memory(state::MemoryCounter& counter) const {
  for (const auto& flat : flats_) {
    if (shards_on_host_) {
      counter.offloaded(flat->shard());
      counter.offloaded(flat->allocated_shard_gradient());
    }
    counter.parameter(flat->shard());
    counter.parameter(flat->flat());  // 0 bytes while a Zero3 unit is not gathered
    counter.gradient(flat->allocated_shard_gradient());  // none before it is first needed
    counter.gradient(flat->gradient());
  }
}

ACCEL_DECL void FlatParameterSet::install_hook(const torch::Tensor& parameter, std::size_t f,
                                               std::size_t i) {
  auto accumulator = torch::autograd::impl::grad_accumulator(parameter);
  accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [this, f, i](const torch::autograd::variable_list& outputs,
                   const torch::autograd::variable_list& /*inputs*/) {
        pending_[f] = 1;
        produced_[f][i] = 1;
        arrived_(f, i);
        return outputs;
      }));
  accumulators_.push_back(std::move(accumulator));
}

ACCEL_DECL void FlatParameterSet::fail_trainability(const std::string& parameter,
                                                    const std::string& model,
                                                    std::string_view change) const {
  accel::detail::fail("{}: parameter '{}' of {} was {} after prepare(); the flat parameters and "
                      "their shards are laid out at prepare(), so set requires_grad before "
                      "preparing the model (prepare it again in a new Accelerator to change "
                      "which parameters train)",
                      name_, parameter, model, change);
}

}  // namespace accel::parallel::detail
