// How Zero3 and Fsdp<FullShard> cut a model into units, each gathered whole only while it runs.
// Libtorch modules have no forward hooks, so a unit is a module whose calls accel can intercept:
//   - a module marked with accel::Sharded (../sharded.hpp), anywhere in the tree (a ModuleList's
//     blocks, a member): its own forward calls the strategy through its UnitRoute;
//   - a child of a torch::nn::Sequential, whose call goes through the Sequential's AnyModule
//     entry (replaced by a wrapper that gathers, runs the child and frees).
// Everything else of a prepared model forms its root unit, gathered from the model's forward to
// the end of its backward.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../../detail/sequential_entry.hpp"
#include "../unit_route.hpp"

namespace accel::parallel::detail {

using NamedParameters = std::vector<std::pair<std::string, torch::Tensor>>;

// A module that becomes a unit: marked (`marked` set) or a child of a Sequential (`parent`).
struct SequentialChild {
  std::string name;                                // its path in the prepared model
  std::shared_ptr<torch::nn::SequentialImpl> parent;
  std::shared_ptr<torch::nn::Module> module;
  MarkedUnit* marked = nullptr;
};

// The units in `module`'s tree in registration order (a ModuleList's blocks in their order,
// which is the order most forwards call them): marked modules, and the children of every
// Sequential. What lies inside a unit belongs to it (one unit) and is not listed.
inline std::vector<SequentialChild> sequential_children(const std::shared_ptr<torch::nn::Module>& module,
                                                        const std::string& prefix = "") {
  std::vector<SequentialChild> found;
  const auto sequential = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(module);
  for (const auto& child : module->named_children()) {
    const std::string name = prefix.empty() ? child.key() : prefix + "." + child.key();
    if (auto* marked = dynamic_cast<MarkedUnit*>(child.value().get())) {
      found.push_back({name, sequential, child.value(), marked});
    } else if (sequential) {
      found.push_back({name, sequential, child.value()});
    } else {
      auto inner = sequential_children(child.value(), name);
      found.insert(found.end(), inner.begin(), inner.end());
    }
  }
  return found;
}

// The parameters of `part` (a submodule of a model with `references`, the count of each
// parameter's names in the whole model) that no module outside `part` shares, named by their
// path in the model.
inline NamedParameters exclusive_parameters(
    torch::nn::Module& part, const std::string& prefix,
    const std::unordered_map<const void*, int>& references) {
  std::unordered_map<const void*, int> inside;
  const auto named = part.named_parameters();
  for (const auto& item : named) ++inside[item.value().unsafeGetTensorImpl()];
  NamedParameters result;
  for (const auto& item : named) {
    const void* key = item.value().unsafeGetTensorImpl();
    if (inside[key] == references.at(key)) result.emplace_back(prefix + "." + item.key(), item.value());
  }
  return result;
}

// How Zero3 cuts `module` into units: each unit's module with the parameters it alone holds, in
// registration order, then what is left, the root unit's. prepare() builds its units from this,
// and estimate_memory's answer for Zero3 (memory_layout) counts them from it.
struct UnitCut {
  std::vector<std::pair<SequentialChild, NamedParameters>> children;
  NamedParameters root;
};
inline UnitCut cut_units(torch::nn::Module& module) {
  std::unordered_map<const void*, int> references;
  const auto all = module.named_parameters();
  for (const auto& item : all) ++references[item.value().unsafeGetTensorImpl()];
  UnitCut cut;
  std::unordered_set<const void*> in_units;
  for (auto& child : sequential_children(module.shared_from_this())) {
    auto named = exclusive_parameters(*child.module, child.name, references);
    for (const auto& [name, p] : named) in_units.insert(p.unsafeGetTensorImpl());
    cut.children.emplace_back(std::move(child), std::move(named));
  }
  for (const auto& item : all)
    if (in_units.count(item.value().unsafeGetTensorImpl()) == 0)
      cut.root.emplace_back(item.key(), item.value());
  return cut;
}

// What a Sequential calls in place of a unit's module: `around(unit, run)` gathers the unit,
// runs the module on the input and frees the unit again. One tensor in, one tensor out: the
// signature of nearly every Sequential child (docs/concepts/strategies.md#zero3 for the others).
template <class Owner>
class UnitCallImpl : public torch::nn::Module {
 public:
  UnitCallImpl(Owner* owner, std::size_t unit, torch::nn::AnyModule inner)
      : owner_(owner), unit_(unit), inner_(std::move(inner)) {}

  torch::Tensor forward(torch::Tensor input) {
    return owner_->unit_forward(unit_, [&] { return inner_.forward(std::move(input)); });
  }

 private:
  Owner* owner_;
  std::size_t unit_;
  torch::nn::AnyModule inner_;
};

// Routes the Sequential's call of `child` through `owner`'s unit `unit`, around whatever the
// entry calls already (Options::activation_checkpointing's wrapper, Fp8's Linear).
template <class Owner>
void intercept_calls(const SequentialChild& child, Owner* owner, std::size_t unit) {
  const auto entry = accel::detail::sequential_entry(*child.parent, *child.module);
  if (entry == child.parent->end()) return;
  *entry = torch::nn::AnyModule(std::make_shared<UnitCallImpl<Owner>>(owner, unit, std::move(*entry)));
}

}  // namespace accel::parallel::detail
