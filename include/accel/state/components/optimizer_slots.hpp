// Checkpoint component: the prepared optimizers. Their type and every param group's options go
// into the manifest; their per-parameter state into the rank files as slices, each rank the
// slots the strategy says it holds (parallel/contract.hpp's state_slots), field by field for the
// optimizers accel knows (../optimizer_state.hpp) and as rank 0's libtorch archive for any other.
// A load checks type, groups and options, and rebuilds the state this rank holds now. The
// protocol: component.hpp.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../../detail/error.hpp"
#include "../../detail/torch_compat.hpp"
#include "../manifest.hpp"
#include "../optimizer_state.hpp"
#include "../slice_catalog.hpp"
#include "component.hpp"
#include "placed_slices.hpp"

namespace accel::state::components {

struct OptimizerSlots {
  // Save: this rank's slots (a "step" whole, the other fields as slices); an optimizer accel
  // does not know field by field, as rank 0's archive.
  template <class View>
  static void add_tensors(const View& view, int rank, NamedTensors& named) {
    for (std::size_t o = 0; o < view.optimizers.size(); ++o) {
      torch::optim::Optimizer& user = *view.optimizers[o];
      const OptimizerKind kind = kind_of(user);
      if (kind == OptimizerKind::other) {
        refuse_archive_under_tensor_parallelism(view, o, "save_state");
        if (rank != 0) continue;
        torch::serialize::OutputArchive archive;
        user.save(archive);
        std::ostringstream out;
        archive.save_to(out);
        named.emplace_back(optimizer_archive_name(o), detail::bytes_tensor(out.str()));
        continue;
      }
      for (const auto& slot : view.strategy.state_slots(user, /*saving=*/true, rank)) {
        const auto& state = slot.holder->state();
        const auto found = state.find(accel::detail::optimizer_state_key(slot.key));
        if (found == state.end()) continue;  // not stepped yet
        for (auto& [field, t] : param_state_tensors(kind, *found->second)) {
          const std::string base = state_tensor_name(o, slot.group, slot.index, field);
          if (field == "step")
            named.emplace_back(base, detail::cpu_copy(t));
          else
            add_placed(named, base, slot.begin, t, slot.placement);
        }
      }
    }
  }

  template <class View>
  static void describe(const View& view, Manifest& manifest) {
    for (const auto* optimizer : view.optimizers) {
      const OptimizerKind kind = kind_of(*optimizer);
      OptimizerRecord& record = manifest.optimizers.emplace_back();
      record.type = std::string(kind_name(kind));
      for (const auto& group : optimizer->param_groups())
        record.groups.push_back({group.params().size(), options_json(kind, group.options())});
    }
  }

  template <class View>
  static void check(const View&, const Manifest&, const std::string&) {}

  // Load: options of every param group, and the state this rank holds.
  template <class View>
  static void stage(const Staging<View>& s) {
    const View& view = s.view;
    const SliceCatalog& catalog = s.catalog;
    auto& apply = s.apply;
    const auto& optimizers = s.manifest.optimizers;
    if (optimizers.size() != view.optimizers.size())
      accel::detail::fail("load_state: '{}' holds {} optimizers, {} are prepared", s.where,
                          optimizers.size(), view.optimizers.size());
    for (std::size_t o = 0; o < view.optimizers.size(); ++o) {
      torch::optim::Optimizer& user = *view.optimizers[o];
      const OptimizerKind kind = kind_of(user);
      const auto& saved = optimizers[o];
      const std::string label = fmt::format("optimizer #{} in '{}'", o, s.where);
      if (saved.type != kind_name(kind))
        accel::detail::fail("load_state: {} is {}, the prepared one is {}", label, saved.type,
                            kind_name(kind));
      auto& groups = user.param_groups();
      const auto& saved_groups = saved.groups;
      if (saved_groups.size() != groups.size())
        accel::detail::fail("load_state: {} has {} param groups, the prepared one {}", label,
                            saved_groups.size(), groups.size());
      for (std::size_t g = 0; g < groups.size(); ++g) {
        const std::size_t count = saved_groups[g].parameters;
        if (count != groups[g].params().size())
          accel::detail::fail("load_state: param group {} of {} has {} parameters, the prepared "
                              "one {}",
                              g, label, count, groups[g].params().size());
        std::shared_ptr<torch::optim::OptimizerOptions> options = options_from_json(
            kind, groups[g].options(), saved_groups[g].options,
            fmt::format("param group {} of {}", g, label));
        apply.push_back([&group = groups[g], options] { group.set_options(options->clone()); });
      }
      if (kind == OptimizerKind::other) {
        refuse_archive_under_tensor_parallelism(view, o, "load_state");
        auto archive = std::make_shared<torch::serialize::InputArchive>();
        std::istringstream in(detail::tensor_bytes(catalog.whole(optimizer_archive_name(o))));
        archive->load_from(in);
        apply.push_back([&user, archive] { user.load(*archive); });
        continue;
      }
      stage_slots(s, o, user, kind, label);
    }
  }

 private:
  // An optimizer accel does not know field by field is one libtorch archive, rank 0's: under
  // tensor parallelism the ranks of a group hold different slices, whose state that archive
  // neither holds nor fits. Refused on every rank, before anything is written or changed.
  template <class View>
  static void refuse_archive_under_tensor_parallelism(const View& view, std::size_t o,
                                                      const char* call) {
    const int degree = view.policies.tensor_parallel;
    if (degree > 1)
      accel::detail::fail("{}: optimizer #{} is of a type accel does not save field by field, "
                          "only as one rank's libtorch archive, and under {} the ranks of a "
                          "tensor-parallel group ({} of them) hold different slices; use SGD, "
                          "Adam, AdamW, Adagrad or RMSprop, or save that optimizer's state "
                          "yourself",
                          call, o, view.policies.parallelism, degree);
  }

  // The state of the slots this rank holds now, wherever the checkpoint's slices cover them.
  template <class View>
  static void stage_slots(const Staging<View>& s, std::size_t o, torch::optim::Optimizer& user,
                          OptimizerKind kind, const std::string& label) {
    const SliceCatalog& catalog = s.catalog;
    struct Staged {
      torch::optim::Optimizer* holder;
      decltype(accel::detail::optimizer_state_key(torch::Tensor())) key;
      std::shared_ptr<torch::optim::OptimizerParamState> state;
    };
    auto staged = std::make_shared<std::vector<Staged>>();
    std::vector<torch::optim::Optimizer*> holders;
    for (const auto& slot : s.view.strategy.state_slots(user, /*saving=*/false, s.rank)) {
      if (std::find(holders.begin(), holders.end(), slot.holder) == holders.end())
        holders.push_back(slot.holder);
      const std::string prefix = fmt::format("optimizer{}/{}/{}/", o, slot.group, slot.index);
      std::map<std::string, torch::Tensor> fields;
      for (const auto& base : catalog.sliced_under(prefix))
        fields[base.substr(prefix.size())] = read_placed(catalog, base, slot.begin, slot.numel,
                                                         slot.placement, slot.key.scalar_type());
      if (catalog.has(prefix + "step")) fields["step"] = catalog.whole(prefix + "step");
      if (fields.empty()) continue;  // the parameter had no state when saved
      const std::string name = fmt::format("state of parameter {} of param group {} of {}",
                                           slot.index, slot.group, label);
      std::shared_ptr<torch::optim::OptimizerParamState> state =
          make_param_state(kind, fields, slot.key.sizes(), slot.key.options(), name);
      staged->push_back(
          {slot.holder, accel::detail::optimizer_state_key(slot.key), std::move(state)});
    }
    s.apply.push_back([holders, staged] {
      for (auto* holder : holders) holder->state().clear();
      for (auto& staged_state : *staged)
        staged_state.holder->state()[staged_state.key] = staged_state.state->clone();
    });
  }
};

}  // namespace accel::state::components
