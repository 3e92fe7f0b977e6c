// Options::activation_checkpointing: prepare() checkpoints every child of the model's
// Sequentials, as FSDP's apply_activation_checkpointing wraps each block. Libtorch modules have
// no forward hooks, so, as Zero3's units do (parallel/detail/units.hpp), the wrapper replaces
// the Sequential's call entry (AnyModule) and not the registered child: parameter names, state
// dicts and checkpoints stay as they were. The children taken are the units' (the outermost
// Sequentials' children), and the wrapping comes before the strategy's, so a Zero3 unit
// gathers, then runs its child checkpointed.
//
// Limits, said in docs/how-to/large-models.md: a child is called with one tensor and returns one (Zero3's
// unit rule); a child without parameters (an activation, dropout) is left alone, since its
// recompute would save nothing; ModuleList elements are called by the model's own forward, which
// accel cannot intercept: declare those as accel::Checkpointed<Block>.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "../detail/sequential_entry.hpp"
#include "../parallel/detail/units.hpp"
#include "activation_checkpoint.hpp"
#include "checkpointed.hpp"

namespace accel::memory {

namespace detail {

// What a Sequential calls in place of a checkpointed child.
class CheckpointCallImpl : public torch::nn::Module {
 public:
  CheckpointCallImpl(torch::nn::AnyModule inner, TensorNames names)
      : inner_(std::move(inner)), names_(std::move(names)) {}

  torch::Tensor forward(torch::Tensor input) {
    return memory::detail::checkpoint(
        &names_, [this](const torch::Tensor& x) { return inner_.forward(x); }, std::move(input));
  }

 private:
  torch::nn::AnyModule inner_;
  TensorNames names_;
};

// Wraps the children with parameters of the Sequentials in `model`, less each Sequential's last
// one where `except_last`; returns how many it wrapped.
inline std::size_t checkpoint_children(const std::shared_ptr<torch::nn::Module>& model,
                                       bool except_last) {
  std::vector<parallel::detail::SequentialChild> chosen;
  for (const auto& child : parallel::detail::sequential_children(model))
    if (!child.module->parameters().empty()) chosen.push_back(child);
  std::size_t wrapped = 0;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const auto& child = chosen[i];
    const bool last_of_parent = i + 1 == chosen.size() || chosen[i + 1].parent != child.parent;
    if (except_last && last_of_parent) continue;
    const auto entry = accel::detail::sequential_entry(*child.parent, *child.module);
    if (entry == child.parent->end()) continue;
    TensorNames names;
    for (const auto& item : child.module->named_parameters())
      names.emplace(item.value().unsafeGetTensorImpl(), child.name + "." + item.key());
    *entry = torch::nn::AnyModule(
        std::make_shared<CheckpointCallImpl>(std::move(*entry), std::move(names)));
    ++wrapped;
  }
  return wrapped;
}

}  // namespace detail

// Checkpoints every child with parameters of the Sequentials in `model` (see above) and returns
// how many it wrapped. A child that is a Checkpointed<...> already would then be checkpointed
// twice (correct, but recomputed twice): use one or the other.
inline std::size_t checkpoint_sequential_children(const std::shared_ptr<torch::nn::Module>& model) {
  return detail::checkpoint_children(model, /*except_last=*/false);
}

// The same but for each Sequential's last child with parameters, as torch.utils.checkpoint's
// checkpoint_sequential leaves its last segment unchecked: backward starts with that child, so
// its recompute would run right after its forward and free little at the peak, while costing a
// forward of it every step (docs/how-to/large-models.md, "Activation checkpointing", has the measured
// trade-off).
inline std::size_t checkpoint_sequential_children_except_last(
    const std::shared_ptr<torch::nn::Module>& model) {
  return detail::checkpoint_children(model, /*except_last=*/true);
}

}  // namespace accel::memory
