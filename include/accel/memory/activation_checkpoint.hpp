// Activation checkpointing: accel::checkpoint(fn, inputs...) runs fn(inputs...) and keeps none of
// the activations its autograd graph would save; backward runs fn again (the recompute) to get
// them back, one segment at a time. Memory for compute, as torch.utils.checkpoint.
//
//   auto h = accel::checkpoint([&](const torch::Tensor& x) { return block->forward(x); }, x);
//
// How (one torch::autograd::Function, a CRTP class of static functions):
//   forward   fn runs with autograd recording, on detached aliases of the tensor inputs, so that
//             its graph names the leaves it reads (parameters, and any other leaf requiring a
//             gradient); their versions are noted, then the graph, and with it every saved
//             activation, is dropped. One node takes its place, whose inputs are the tensor
//             inputs and those leaves: their gradients flow through the outer graph, so each
//             parameter's gradient accumulator (and Ddp's or Zero3's hook on it) fires once per
//             backward, with the sum of every use, exactly as without checkpointing.
//             (torch.utils.checkpoint's default, non-reentrant mode also runs the forward with
//             autograd on, and drops what it saves.)
//   backward  the inputs and leaves must be at the versions the forward saw, or the recompute
//             would compute other activations than the forward used: an accel: error names the
//             tensor. Then fn runs again under the forward's RNG states (CPU, and CUDA of the
//             inputs' devices; the loop's own stream is put back after) and autocast state, and
//             torch::autograd::grad gives the inputs' and leaves' gradients. Zero3 and Fsdp
//             units gather their parameters before their backward begins, so a checkpointed
//             unit's recompute finds them whole.
//
// Inputs may be tensors, numbers, std::string and any nesting of aggregates, std::vector,
// std::tuple, std::pair, std::array and std::optional of them (data/tensor_tree.hpp); they are
// copied (tensors as aliases) for the recompute. fn may return the same kinds of values; its
// non-floating tensors come back without gradients. Without grad mode fn simply runs.
// Tensors with autograd history that fn reads without taking them as inputs are an error: their
// gradient would be lost.
#pragma once

#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../data/tensor_tree.hpp"
#include "../detail/error.hpp"
#include "../detail/shape_text.hpp"
#include "autocast_state.hpp"
#include "rng_states.hpp"

namespace accel::memory {

// Names of tensors, by TensorImpl, for error messages (a Checkpointed module's parameters).
using TensorNames = std::unordered_map<const void*, std::string>;

namespace detail {

using torch::autograd::variable_list;

// What the recompute needs, owned by the checkpoint's autograd node (a capsule in its context).
struct CheckpointState : torch::CustomClassHolder {
  // fn on the given tensor inputs (in the order they were flattened), its tensor outputs flat.
  std::function<variable_list(const variable_list&)> rerun;
  variable_list inputs;  // detached aliases: the same data and version counters
  std::vector<std::int64_t> input_versions;
  std::vector<bool> input_requires_grad;
  variable_list leaves;  // parameters (and other leaves) the forward read
  std::vector<std::int64_t> leaf_versions;
  TensorNames names;
  RngStates rng;
  AutocastState autocast;
  variable_list outputs;  // handed to the node's forward, then released
  std::vector<bool> output_differentiable;
};

inline bool differentiable(const torch::Tensor& t) {
  return t.is_floating_point() || t.is_complex();
}

inline std::string describe(const torch::Tensor& t, const TensorNames& names, const char* kind,
                            std::size_t index) {
  const auto found = names.find(t.unsafeGetTensorImpl());
  if (found != names.end()) return fmt::format("parameter '{}'", found->second);
  return fmt::format("{} #{} ({} [{}])", kind, index, c10::toString(t.scalar_type()),
                     accel::detail::shape_text(t.sizes()));
}

// The leaves requiring a gradient that `outputs`' graph reaches, in the order met; fails on a
// node older than the segment (`first_node`): a tensor with history fn read from outside.
inline variable_list graph_leaves(const variable_list& outputs, std::uint64_t first_node,
                                  const std::unordered_set<const void*>& own_inputs) {
  variable_list leaves;
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> pending;
  for (const auto& out : outputs)
    if (out.grad_fn()) pending.push_back(out.grad_fn().get());
  while (!pending.empty()) {
    torch::autograd::Node* node = pending.back();
    pending.pop_back();
    if (!seen.insert(node).second) continue;
    if (const auto* leaf = dynamic_cast<const torch::autograd::AccumulateGrad*>(node)) {
      if (own_inputs.count(leaf->variable.unsafeGetTensorImpl()) == 0)
        leaves.push_back(leaf->variable);
      continue;
    }
    if (node->sequence_nr() < first_node)
      accel::detail::fail(
          "checkpoint: the function reads a tensor whose autograd history began before the "
          "checkpoint (its gradient node is {}) without taking it as an input, so its gradient "
          "would be lost; pass that tensor to accel::checkpoint() as an argument",
          node->name());
    for (const auto& edge : node->next_edges())
      if (edge.function) pending.push_back(edge.function.get());
  }
  return leaves;
}

// Detached aliases of `tensors`, each requiring a gradient where `requires_grad` says.
inline variable_list detached(const variable_list& tensors, const std::vector<bool>& requires_grad) {
  variable_list out;
  out.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i)
    out.push_back(tensors[i].detach().requires_grad_(requires_grad[i]));
  return out;
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // inputs and leaves: the node's inputs (their gradients are what backward returns).
  static variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList /*inputs*/,
                               at::TensorList /*leaves*/,
                               const c10::intrusive_ptr<CheckpointState>& state) {
    ctx->set_materialize_grads(false);
    variable_list outputs = std::move(state->outputs);
    state->outputs.clear();
    variable_list fixed;
    for (std::size_t i = 0; i < outputs.size(); ++i)
      if (!state->output_differentiable[i]) fixed.push_back(outputs[i]);
    ctx->mark_non_differentiable(fixed);
    ctx->saved_data["accel.checkpoint"] = c10::IValue::make_capsule(state);
    return outputs;
  }

  static variable_list backward(torch::autograd::AutogradContext* ctx,
                                const variable_list& grad_outputs) {
    const auto state = c10::static_intrusive_pointer_cast<CheckpointState>(
        ctx->saved_data.at("accel.checkpoint").toCapsule());
    for (std::size_t i = 0; i < state->inputs.size(); ++i)
      if (state->inputs[i]._version() != state->input_versions[i])
        stale(describe(state->inputs[i], state->names, "input", i), state->input_versions[i],
              state->inputs[i]._version());
    for (std::size_t i = 0; i < state->leaves.size(); ++i)
      if (state->leaves[i]._version() != state->leaf_versions[i])
        stale(describe(state->leaves[i], state->names, "parameter", i), state->leaf_versions[i],
              state->leaves[i]._version());

    variable_list run_inputs = detached(state->inputs, state->input_requires_grad);
    variable_list outputs;
    {
      ReplayRng rng(state->rng);
      ReplayAutocast autocast(state->autocast);
      torch::AutoGradMode grad_mode(true);
      outputs = state->rerun(run_inputs);
    }
    variable_list roots, root_grads;
    for (std::size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i)
      if (grad_outputs[i].defined() && outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grad_outputs[i]);
      }
    variable_list targets;
    std::vector<std::size_t> input_slot;  // where each input's gradient lands in targets
    for (std::size_t i = 0; i < run_inputs.size(); ++i) {
      input_slot.push_back(targets.size());
      if (state->input_requires_grad[i]) targets.push_back(run_inputs[i]);
    }
    for (const auto& leaf : state->leaves) targets.push_back(leaf);
    variable_list grads(targets.size());
    if (!roots.empty() && !targets.empty())
      grads = torch::autograd::grad(roots, targets, root_grads, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    variable_list result;
    result.reserve(run_inputs.size() + state->leaves.size() + 1);
    for (std::size_t i = 0; i < run_inputs.size(); ++i)
      result.push_back(state->input_requires_grad[i] ? grads[input_slot[i]] : torch::Tensor());
    const std::size_t first_leaf = targets.size() - state->leaves.size();
    for (std::size_t i = 0; i < state->leaves.size(); ++i) result.push_back(grads[first_leaf + i]);
    result.emplace_back();  // the state argument
    return result;
  }

  [[noreturn]] static void stale(const std::string& what, std::int64_t then, std::int64_t now) {
    accel::detail::fail(
        "checkpoint: {} was modified in place between the checkpointed forward and its backward "
        "(version {} then, {} now), so the recompute would not reproduce the activations the "
        "forward used; modify it only after backward (optimizer.step() after "
        "accelerator.backward()), or leave this segment out of checkpointing",
        what, then, now);
  }
};

// A copy of `value` with its tensors replaced, in flattening order, by `tensors` from `next` on.
template <class T>
T with_tensors(const T& value, const variable_list& tensors, std::size_t& next) {
  return data::map_tensors(value, [&](const torch::Tensor&) { return tensors.at(next++); });
}

template <class T>
void flatten_into(const T& value, variable_list& out) {
  data::for_each_tensor(value, [&](const torch::Tensor& t) { out.push_back(t); });
}

template <class Fn, class... Args>
auto checkpoint_returning(const TensorNames* names, Fn&& fn, Args&&... args) {
  using Result = std::invoke_result_t<std::decay_t<Fn>&, std::decay_t<Args>&...>;
  if (!torch::GradMode::is_enabled()) return std::invoke(fn, args...);

  // Copies of fn and the arguments, for the recompute; tensors stay aliases of the caller's.
  auto stored = std::make_shared<std::tuple<std::decay_t<Fn>, std::tuple<std::decay_t<Args>...>>>(
      std::forward<Fn>(fn), std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...));
  auto run = [stored](const variable_list& tensors) {
    std::size_t next = 0;
    auto& [function, arguments] = *stored;
    auto rebuilt = std::apply(
        [&](const auto&... arg) { return std::tuple{with_tensors(arg, tensors, next)...}; },
        arguments);
    return std::apply(function, rebuilt);
  };

  auto state = c10::make_intrusive<CheckpointState>();
  variable_list inputs;
  std::apply([&](const auto&... arg) { (flatten_into(arg, inputs), ...); }, std::get<1>(*stored));
  std::vector<c10::DeviceIndex> cuda_devices;
  for (const auto& t : inputs) {
    state->inputs.push_back(t.detach());
    state->input_versions.push_back(t._version());
    state->input_requires_grad.push_back(t.requires_grad() && differentiable(t));
    if (t.is_cuda() && std::find(cuda_devices.begin(), cuda_devices.end(), t.get_device()) ==
                           cuda_devices.end())
      cuda_devices.push_back(t.get_device());
  }
  state->rng = RngStates::capture(cuda_devices);
  state->autocast = AutocastState::capture();
  if (names != nullptr) state->names = *names;

  // The forward, recorded so that its graph names the leaves it reads; then the graph goes.
  const variable_list run_inputs = detached(state->inputs, state->input_requires_grad);
  std::unordered_set<const void*> own;
  for (const auto& t : run_inputs) own.insert(t.unsafeGetTensorImpl());
  const std::uint64_t first_node = at::sequence_number::peek();
  std::optional<Result> result(run(run_inputs));
  variable_list outputs;
  flatten_into(*result, outputs);
  state->leaves = graph_leaves(outputs, first_node, own);
  for (const auto& leaf : state->leaves) state->leaf_versions.push_back(leaf._version());
  const bool any_gradient = std::any_of(outputs.begin(), outputs.end(), [](const torch::Tensor& t) {
    return t.requires_grad();
  });
  if (!any_gradient) return std::move(*result);
  for (const auto& out : outputs) {  // without the recorded graph; the node becomes their grad_fn
    state->outputs.push_back(out.detach());
    state->output_differentiable.push_back(out.requires_grad() && differentiable(out));
  }
  for (auto& t : outputs) t = torch::Tensor();  // the recorded graph ends with these
  state->rerun = [run](const variable_list& tensors) {
    variable_list flat;
    flatten_into(run(tensors), flat);
    return flat;
  };
  const variable_list wrapped =
      CheckpointFunction::apply(at::TensorList(inputs), at::TensorList(state->leaves), state);
  std::size_t next = 0;
  return with_tensors(*result, wrapped, next);
}


// The checked entry: a function returning nothing is the one error, not the cascade its body
// would give.
template <class Fn, class... Args>
auto checkpoint(const TensorNames* names, Fn&& fn, Args&&... args) {
  using Result = std::invoke_result_t<std::decay_t<Fn>&, std::decay_t<Args>&...>;
  static_assert(!std::is_void_v<Result>,
                "accel: checkpoint(fn, inputs...): fn returns nothing, so there is nothing to "
                "backpropagate through; return its output tensor(s)");
  if constexpr (!std::is_void_v<Result>)
    return checkpoint_returning(names, std::forward<Fn>(fn), std::forward<Args>(args)...);
}

}  // namespace detail

// fn(inputs...) without saving its activations; backward recomputes them (see above).
template <class Fn, class... Args>
auto checkpoint(Fn&& fn, Args&&... args) {
  return detail::checkpoint(nullptr, std::forward<Fn>(fn), std::forward<Args>(args)...);
}

}  // namespace accel::memory

namespace accel {
using memory::checkpoint;
}  // namespace accel
