// ShardedGradientStrategy's members that do not depend on the caller's types (zero2.hpp includes
// this file in header-only mode; with ACCEL_SEPARATE_COMPILATION accel's separately compiled
// part compiles them here, once).
#pragma once

#include <unordered_set>

#include "../../detail/error.hpp"
#include "../detail/impl/sharded_strategy.ipp"
#include "../detail/layout_groups.hpp"
#include "../zero2.hpp"

namespace accel::parallel {

ACCEL_DECL void ShardedGradientStrategy::attach(runtime::ProcessGroup* process_group,
                                                const Options& options) {
  Base::attach(process_group, options);
  const Zero2Options& zero2 = options.zero2;
  if (!(zero2.first_bucket_mb > 0) || !(zero2.bucket_mb > 0) || zero2.reduce_scatters_in_flight < 0)
    accel::detail::fail("{}: Options::zero2 has first_bucket_mb {}, bucket_mb {} and "
                        "reduce_scatters_in_flight {}; the caps must be positive and the "
                        "reduce-scatters in flight 0 or more (the defaults: 1, 25 and 0)",
                        name_, zero2.first_bucket_mb, zero2.bucket_mb,
                        zero2.reduce_scatters_in_flight);
  if (options.offload.parameters)
    accel::detail::fail("{}: Options::offload.parameters keeps parameter shards on the CPU "
                        "between uses, and {} keeps every parameter whole on each rank (only "
                        "gradients and optimizer state are sharded); use Zero3 or "
                        "Fsdp<FullShard> to offload parameters, or offload.optimizer alone",
                        name_, name_);
  if (options.sharded_communication.parameters)
    accel::detail::fail("{}: Options::sharded_communication.parameters all-gathers parameters in "
                        "a narrower dtype, and {} keeps its full parameters between steps, where "
                        "they would be rounded copies of the shards; set only "
                        "sharded_communication.gradients under {}, or use Zero3 or "
                        "Fsdp<FullShard>, which gather each unit for its use",
                        name_, name_, name_);
  caps_ = {zero2.first_bucket_mb, zero2.bucket_mb};
  max_in_flight_ = static_cast<std::size_t>(zero2.reduce_scatters_in_flight);
}

ACCEL_DECL void ShardedGradientStrategy::prepare_model(torch::nn::Module& module,
                                                       const std::string& label) {
  if (group_ == nullptr) return;
  begin_prepare(module, label);
  // Each parameter once, in registration order: one registered under two names (tied
  // weights), or already flattened with a model prepared earlier, is not bucketed again.
  Named unique;
  std::vector<torch::Tensor> parameters;
  std::unordered_set<const void*> seen;
  for (const auto& item : module.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (is_flattened(p) || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    unique.emplace_back(item.key(), p);
    parameters.push_back(p);
  }
  Named frozen;
  for (const auto& entry : unique)
    if (!entry.second.requires_grad()) frozen.push_back(entry);
  flats_.flatten(frozen, label, Residency::replicated);  // recorded, not flattened
  Model& model = models_.emplace_back();
  for (const auto& members : detail::assign_buckets(parameters, caps_)) {
    Named bucket;
    for (const std::size_t k : members) bucket.push_back(unique[k]);
    for (const std::size_t f : flats_.flatten(bucket, label, Residency::replicated)) {
      model.flats.push_back(f);
      model_of_.resize(f + 1, 0);
      model_of_[f] = models_.size() - 1;
    }
  }
  waiting_.resize(flats_.size(), 0);
}

ACCEL_DECL void ShardedGradientStrategy::before_backward(bool sync) {
  if (group_ == nullptr) return;
  begin_backward(sync);
  sync_ = sync;
  for (auto& model : models_) {
    model.launched = 0;
    model.reached = false;
  }
  for (std::size_t f = 0; f < flats_.size(); ++f) waiting_[f] = flats_[f].parameters().size();
}

ACCEL_DECL void ShardedGradientStrategy::after_backward(bool sync) {
  if (group_ == nullptr || !sync) return;
  for (auto& model : models_) {
    if (!takes_part(model)) {
      for (const std::size_t f : model.flats) flats_[f].release_gradients();
      continue;
    }
    while (model.launched < model.flats.size()) {
      const std::size_t f = model.flats[model.launched++];
      flats_[f].attach_gradients();  // zeros where no gradient arrived
      launch(f);
    }
  }
  while (!in_flight_.empty()) land_oldest();
  reduce_scatter_.set_in_shards(true);
  flats_.agree_on_gradients(*group_);
}

ACCEL_DECL bool ShardedGradientStrategy::takes_part(const Model& model) const {
  if (model.reached) return true;
  for (const std::size_t f : model.flats)
    if (flats_.pending(f)) return true;
  return false;
}

ACCEL_DECL void ShardedGradientStrategy::gradient_arrived(std::size_t f, std::size_t i) {
  flats_[f].attach_gradient(i);
  if (!sync_) return;
  Model& model = models_[model_of_[f]];
  model.reached = true;
  if (waiting_[f] == 0 || --waiting_[f] != 0) return;
  // Complete buckets start from the next one in order, stopping at the first incomplete one.
  while (model.launched < model.flats.size() && waiting_[model.flats[model.launched]] == 0)
    launch(model.flats[model.launched++]);
}

ACCEL_DECL void ShardedGradientStrategy::launch(std::size_t f) {
  flats_.mark_pending(f);
  in_flight_.push_back({f, reduce_scatter_.start(f)});
  while (in_flight_.size() > max_in_flight_) land_oldest();
}

ACCEL_DECL void ShardedGradientStrategy::land_oldest() {
  InFlight landed = std::move(in_flight_.front());
  in_flight_.pop_front();
  landed.reduce_scatter.wait();
  reduce_scatter_.add_to_shard(landed.flat, landed.reduce_scatter.result);
  flats_[landed.flat].release_gradients();
}

ACCEL_DECL void ShardedGradientStrategy::after_shard_step(const std::vector<std::size_t>& flats) {
  torch::NoGradGuard no_grad;
  for (const std::size_t f : flats) {
    FlatParameter& flat = flats_[f];
    shard_group_->allgather_into(flat.flat(), flat.shard());
  }
}

ACCEL_DECL MemoryLayout ShardedGradientStrategy::memory_layout(torch::nn::Module& model,
                                                               const LayoutRequest& request) {
  if (request.world_size <= 1) return detail::whole_layout(model, request);
  MemoryLayout layout;
  layout.shard_world = request.world_size;
  layout.shard_rank = request.rank;
  // Each parameter once, frozen ones in no bucket.
  std::unordered_set<const void*> seen;
  std::vector<torch::Tensor> trainable;
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    if (p.requires_grad())
      trainable.push_back(p);
    else
      layout.frozen_bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
  }
  const detail::BucketCaps caps{request.first_bucket_mb, request.bucket_mb};
  for (const auto& members : detail::assign_buckets(trainable, caps)) {
    FlatGroup& bucket = layout.flats.emplace_back(
        FlatGroup{0, static_cast<std::int64_t>(trainable[members.front()].element_size()),
                  static_cast<int>(layout.flats.size())});
    for (const std::size_t k : members) bucket.numel += trainable[k].numel();
  }
  return layout;
}

}  // namespace accel::parallel
