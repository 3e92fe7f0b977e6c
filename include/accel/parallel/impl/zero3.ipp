// FullyShardedStrategy's members that do not depend on the caller's types (zero3.hpp includes
// this file in header-only mode; with ACCEL_SEPARATE_COMPILATION accel's separately compiled
// part compiles them here, once).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "../detail/impl/sharded_strategy.ipp"
#include "../detail/sharded_communication.hpp"
#include "../detail/layout_groups.hpp"
#include "../zero3.hpp"

namespace accel::parallel {

ACCEL_DECL void FullyShardedStrategy::attach(runtime::ProcessGroup* group, const Options& options) {
  Base::attach(group, options);
  prefetch_ = options.prefetch_units;
  parameter_wire_ = options.sharded_communication.parameters;
}

ACCEL_DECL void FullyShardedStrategy::prepare_model(torch::nn::Module& module,
                                                    const std::string& label) {
  if (group_ == nullptr) return;
  begin_prepare(module, label);
  cut_into_units(module, label);
}

ACCEL_DECL void FullyShardedStrategy::prepare_deferred_model(
    torch::nn::Module& module, const std::string& label, const torch::Device& device,
    const accel::detail::DeferredBuild& build, const torch::Tensor& generator_state) {
  begin_prepare(module, label, /*broadcast=*/false);
  // What the replay fills, listed while still meta: flattening turns the trainable parameters
  // into (the same) zero-element tensors. Each target a detached alias, which the build knows by
  // its storage; beside it the module's own tensor.
  std::vector<torch::Tensor> targets, tensors;
  std::unordered_set<const void*> listed;
  auto add = [&](const torch::Tensor& t) {
    if (build.id_of(t) < 0 || !listed.insert(t.unsafeGetTensorImpl()).second) return;
    targets.push_back(t.detach());
    tensors.push_back(t);
  };
  for (const auto& p : module.parameters()) add(p);
  for (const auto& b : module.buffers()) add(b);
  flats_.build_on(device);
  cut_into_units(module, label);
  flats_.build_on(torch::kCPU);
  build.replay(
      targets,
      [&](std::size_t k, const torch::Tensor& value) {
        if (const auto* location = flats_.find(tensors[k]))
          flats_[location->flat].fill_piece(location->index, value);
        else  // frozen, or a buffer: whole, as every strategy keeps them
          accel::detail::adopt_value(tensors[k], device.is_cpu() ? value : value.to(device));
      },
      generator_state);
  optimizers_.copy_pieces_to_host();
}

ACCEL_DECL MemoryLayout FullyShardedStrategy::memory_layout(torch::nn::Module& model,
                                                            const LayoutRequest& request) {
  if (request.world_size <= 1) return detail::whole_layout(model, request);
  MemoryLayout layout;
  layout.shard_world = request.world_size;
  layout.shard_rank = request.rank;
  std::unordered_set<const void*> seen;
  const detail::UnitCut cut = detail::cut_units(model);
  int unit = 0;
  for (const auto& [child, named] : cut.children) {
    const std::size_t before = layout.flats.size();
    detail::add_groups(named, unit, seen, layout);
    if (layout.flats.size() != before) ++unit;  // as add_unit: a unit with nothing trainable is none
  }
  detail::add_groups(cut.root, unit, seen, layout);
  return layout;
}

ACCEL_DECL void FullyShardedStrategy::cut_into_units(torch::nn::Module& module,
                                                    const std::string& label) {
  // Counted now: each unit is put to rest as it is made, its parameters then zero-element.
  const std::int64_t total = total_numel(module.named_parameters());
  detail::UnitCut cut = detail::cut_units(module);

  Model& model = models_.emplace_back();
  model.module = &module;
  for (const auto& [child, named] : cut.children) {
    const std::size_t u =
        add_unit(named, fmt::format("{}, unit '{}'", label, child.name), child.name);
    if (u == no_unit) continue;  // nothing trainable: called as it is
    to_rest(u);  // at once: the model's full copy then never exists twice during prepare()
    if (!model.units.empty()) {  // the child units in call order, for prefetching
      units_[model.units.back()].next = u;
      units_[u].previous = model.units.back();
    }
    model.units.push_back(u);
    if (child.marked != nullptr)
      child.marked->unit_route = {
          [this, u] { return enter(u); },
          [this, u](bool was_gathered, const std::vector<torch::Tensor>& outputs) {
            leave(u, was_gathered, outputs);
          }};
    else
      detail::intercept_calls(child, this, u);
  }
  const detail::NamedParameters& rest = cut.root;
  warn_if_mostly_root(rest, total, label);
  model.root = add_unit(rest, label, "the root unit");
  if (model.root != no_unit) {
    model.units.push_back(model.root);
    to_rest(model.root);
  }
  for (const std::size_t u : model.units) units_[u].model = models_.size() - 1;
  // The sending order: the models last prepared first (a GAN's discriminator, whose backward
  // comes before the generator's), each model's child units in reverse call order (the order
  // backward finishes them), then its root (whose first layer's gradient comes last).
  send_order_.clear();
  for (auto m = models_.rbegin(); m != models_.rend(); ++m) {
    for (auto u = m->units.rbegin(); u != m->units.rend(); ++u)
      if (*u != m->root) send_order_.push_back(*u);
    if (m->root != no_unit) send_order_.push_back(m->root);
  }
}

ACCEL_DECL void FullyShardedStrategy::before_forward(torch::nn::Module& module) {
  if (group_ == nullptr) return;
  if (const Model* model = find_model(module); model != nullptr && model->root != no_unit) {
    unit_order_.record(detail::UnitOrderCheck::Event::forward, model->root);
    gather(model->root);
  }
}

ACCEL_DECL void FullyShardedStrategy::before_backward(bool sync) {
  if (group_ == nullptr) return;
  // The forwards' units compared before the backward gathers and sends anything by them.
  unit_order_.check(*group_, name_, unit_names_);
  begin_backward(sync);
  sync_ = sync;
  for (auto& unit : units_) {
    unit.waiting = unit.parameters;
    unit.reached = false;
    unit.finished = false;
  }
  sent_ = 0;
  in_flight_.clear();  // a backward that threw left its sends behind: nothing of them is added
}

ACCEL_DECL void FullyShardedStrategy::after_backward(bool sync) {
  if (group_ == nullptr) return;
  // The units the backward reached, before anything more is sent by them.
  unit_order_.check(*group_, name_, unit_names_);
  if (sync) {
    // A model takes part in the window if its backward reached it here, or gradients it
    // collected on earlier micro-steps wait; each of its units is sent then, on every rank.
    std::vector<char> takes_part(models_.size(), 0);
    for (const Unit& unit : units_) {
      bool part = unit.reached;
      for (const std::size_t f : unit.flats) part = part || flats_.pending(f);
      if (part) takes_part[unit.model] = 1;
    }
    for (; sent_ < send_order_.size(); ++sent_)
      if (takes_part[units_[send_order_[sent_]].model] != 0) send(send_order_[sent_]);
    land_sent();
    reduce_scatter_.set_in_shards(true);
    flats_.agree_on_gradients(*group_);
  }
  for (std::size_t u = 0; u < units_.size(); ++u)
    if (units_[u].reached) to_rest(u);
}

ACCEL_DECL void FullyShardedStrategy::gather_full(torch::nn::Module& module) {
  if (group_ == nullptr) return;
  if (const Model* model = find_model(module))
    for (const std::size_t u : model->units) gather(u, /*master=*/true);
}

ACCEL_DECL void FullyShardedStrategy::release_full(torch::nn::Module& module) {
  if (group_ == nullptr) return;
  const Model* model = find_model(module);
  if (model == nullptr) return;
  torch::NoGradGuard no_grad;
  for (const std::size_t u : model->units) {
    for (const std::size_t f : units_[u].flats) {
      land_gather(f);
      FlatParameter& flat = flats_[f];
      if (!flat.materialized()) continue;
      const auto& layout = flat.layout();
      flat.shard().copy_(flat.flat().narrow(0, flat.rank() * layout.shard_numel,
                                            layout.shard_numel));
    }
    to_rest(u);
  }
  optimizers_.copy_pieces_to_host();
  // The whole model's blocks, which the steps' units (two or three at a time) do not need.
  detail::FlatBufferCache::instance().release();
}

ACCEL_DECL void FullyShardedStrategy::warn_if_mostly_root(const detail::NamedParameters& rest,
                                                          std::int64_t total,
                                                          const std::string& label) const {
  std::int64_t in_root = 0;
  for (const auto& [name, p] : rest) in_root += p.numel();
  constexpr std::int64_t worth_saying = 1 << 20;  // a million parameters
  if (total < worth_saying || 2 * in_root <= total || group_->rank() != 0) return;
  fmt::print(stderr,
             "accel: warning: {}: its root unit holds {:.0f}% of the parameters, which every "
             "rank gathers whole for the whole step; mark the blocks of its ModuleLists (or "
             "other large modules) with accel::Sharded so that each is a unit of its own "
             "(docs/concepts/strategies.md#zero3)\n",
             label, 100.0 * static_cast<double>(in_root) / static_cast<double>(total));
}

ACCEL_DECL std::size_t FullyShardedStrategy::add_unit(const detail::NamedParameters& named,
                                                      const std::string& label, std::string name) {
  const auto flats = flats_.flatten(named, label, Residency::sharded);
  if (flats.empty()) return no_unit;
  unit_names_.push_back(std::move(name));
  Unit& unit = units_.emplace_back();
  unit.flats = flats;
  for (const std::size_t f : flats) {
    unit.parameters += flats_[f].parameters().size();
    unit_of_.resize(f + 1, no_unit);
    unit_of_[f] = units_.size() - 1;
  }
  gathering_.resize(flats_.size());
  narrow_landing_.resize(flats_.size());
  rounded_.resize(flats_.size(), 0);
  return units_.size() - 1;
}

ACCEL_DECL const FullyShardedStrategy::Model* FullyShardedStrategy::find_model(
    const torch::nn::Module& module) const {
  for (const auto& model : models_)
    if (model.module == &module) return &model;
  return nullptr;
}

ACCEL_DECL void FullyShardedStrategy::gather(std::size_t u, bool master) {
  torch::NoGradGuard no_grad;
  units_[u].prefetched = false;
  for (const std::size_t f : units_[u].flats) {
    land_gather(f);
    FlatParameter& flat = flats_[f];
    if (flat.materialized() && !(master && rounded_[f] != 0)) continue;
    flat.materialize();
    const torch::Tensor shard = flat.shard_on_device();
    if (const torch::Tensor sent = narrowed_shard(f, shard, master); sent.defined()) {
      shard_group_->allgather_into(narrow_landing_[f], sent);
      land_gather(f);
    } else {
      shard_group_->allgather_into(flat.flat(), shard);
    }
  }
}

ACCEL_DECL torch::Tensor FullyShardedStrategy::narrowed_shard(std::size_t f,
                                                             const torch::Tensor& shard,
                                                             bool master) {
  rounded_[f] = !master && detail::narrows(parameter_wire_, shard);
  if (rounded_[f] == 0) return {};
  torch::Tensor sent = shard.to(*parameter_wire_);
  detail::require_narrow_wire(*shard_group_, sent, name_, "parameters");
  narrow_landing_[f] = flats_[f].full_size_buffer(*parameter_wire_);
  return sent;
}

ACCEL_DECL void FullyShardedStrategy::land_gather(std::size_t f) {
  gathering_[f].wait();
  if (!narrow_landing_[f].defined()) return;
  flats_[f].flat().copy_(narrow_landing_[f]);
  narrow_landing_[f] = torch::Tensor();
}

ACCEL_DECL void FullyShardedStrategy::prefetch(std::size_t u) {
  if (!prefetch_ || u == no_unit || is_gathered(u)) return;
  torch::NoGradGuard no_grad;
  units_[u].prefetched = true;
  ++prefetches_;
  for (const std::size_t f : units_[u].flats) {
    FlatParameter& flat = flats_[f];
    if (flat.materialized()) continue;
    flat.materialize();
    const torch::Tensor shard = flat.shard_on_device();
    const torch::Tensor sent = narrowed_shard(f, shard, /*master=*/false);
    gathering_[f] = sent.defined() ? shard_group_->allgather_into_async(narrow_landing_[f], sent)
                                   : shard_group_->allgather_into_async(flat.flat(), shard);
  }
}

ACCEL_DECL bool FullyShardedStrategy::is_gathered(std::size_t u) const {
  for (const std::size_t f : units_[u].flats)
    if (!flats_[f].materialized()) return false;
  return true;
}

ACCEL_DECL void FullyShardedStrategy::to_rest(std::size_t u) {
  units_[u].prefetched = false;
  for (const std::size_t f : units_[u].flats) {
    land_gather(f);
    flats_[f].to_rest();
  }
}

ACCEL_DECL bool FullyShardedStrategy::enter(std::size_t u) {
  unit_order_.record(detail::UnitOrderCheck::Event::forward, u);
  const bool was_gathered = is_gathered(u) && !units_[u].prefetched;
  gather(u);
  prefetch(units_[u].next);
  return was_gathered;
}

ACCEL_DECL void FullyShardedStrategy::leave(std::size_t u, bool was_gathered,
                                            const std::vector<torch::Tensor>& outputs) {
  std::vector<torch::Tensor> in_graph;
  if (torch::GradMode::is_enabled())
    for (const auto& t : outputs)
      if (t.defined() && t.requires_grad()) in_graph.push_back(t);
  if (!in_graph.empty()) hook_backward(in_graph, u);
  if (was_gathered) return;
  if (!in_graph.empty())
    for (const std::size_t f : units_[u].flats) flats_[f].free_full();
  else
    to_rest(u);
}

ACCEL_DECL void FullyShardedStrategy::hook_backward(const std::vector<torch::Tensor>& outputs,
                                                    std::size_t u) {
  auto reached = std::make_shared<bool>(false);
  for (const auto& output : outputs)
    output.register_hook([this, u, reached](const torch::Tensor& /*gradient*/) {
      if (*reached) return;
      *reached = true;
      prepare_backward(u);
    });
}

ACCEL_DECL void FullyShardedStrategy::prepare_backward(std::size_t u) {
  unit_order_.record(detail::UnitOrderCheck::Event::backward, u);
  units_[u].reached = true;
  gather(u);
  prefetch(units_[u].previous);
  for (const std::size_t f : units_[u].flats) flats_[f].attach_gradients();
}

ACCEL_DECL void FullyShardedStrategy::gradient_arrived(std::size_t f, std::size_t /*index*/) {
  Unit& unit = units_[unit_of_[f]];
  unit.reached = true;
  if (unit.waiting == 0 || --unit.waiting != 0) return;
  for (const std::size_t g : unit.flats) flats_[g].free_full();
  if (!sync_) return;
  unit.finished = true;
  while (sent_ < send_order_.size() && units_[send_order_[sent_]].finished)
    send(send_order_[sent_++]);
}

ACCEL_DECL void FullyShardedStrategy::send(std::size_t u) {
  land_sent();
  for (const std::size_t f : units_[u].flats) in_flight_.emplace_back(f, reduce_scatter_.start(f));
}

ACCEL_DECL void FullyShardedStrategy::land_sent() {
  for (auto& [f, sent] : in_flight_) {
    sent.wait();
    reduce_scatter_.add_to_shard(f, sent.result);
    flats_[f].release_gradients();
  }
  in_flight_.clear();
}

ACCEL_DECL void FullyShardedStrategy::after_shard_step(const std::vector<std::size_t>& flats) {
  for (const std::size_t f : flats) {
    land_gather(f);
    units_[unit_of_[f]].prefetched = false;
    flats_[f].to_rest();
  }
}

}  // namespace accel::parallel
