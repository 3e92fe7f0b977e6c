// What a parallel::Strategy<Par> must provide, as four concepts, one per role, and the check the
// Accelerator runs on its strategy before anything calls it:
//
//   TrainingStep      the loop's hooks (accelerator_class.hpp): attach, prepare_model, prepare_optimizer,
//                     before_forward, after_forward, before_backward, after_backward,
//                     optimizer_step, zero_grad
//   GradientAccess    what clipping and loss scaling touch (detail/clip.hpp,
//                     precision/dynamic_loss_scaling.hpp): gradients_to_clip, gradients_of,
//                     reduce_norm
//   MemoryAccounting  can_offload, count_memory (Accelerator::memory_use), memory_layout
//                     (estimate_memory: the strategy answers for its own grouping), gather_full
//                     and release_full (Accelerator::full_parameters), and deferred_models:
//                     whether the strategy builds an empty model (accel::deferred_init) itself
//   DeferredModels    the one optional role, taken exactly when deferred_models is true:
//                     prepare_deferred_model, which materializes only this rank's part
//   CheckpointSlices  how parameters and optimizer state map onto a checkpoint's flattened
//                     slices (state/components/): parameter_shape, saved_slice, loaded_slice,
//                     state_slots, is_flattened, flat_gradients, restore_flat_gradients,
//                     after_state_loaded
//
// A strategy takes a role whole, from a base that implements it (replicated.hpp: every rank
// holds everything), or writes every member of it. There are no per-hook defaults: a hook that
// is misspelled or forgotten is a compile-time error naming its role, with g++'s note naming
// the member, and never a silent no-op inherited in its place.
//
// An optional role is declared, never guessed from a member's presence: deferred_models says
// whether the strategy takes DeferredModels, and the check below holds the member to that answer.
// Had the Accelerator asked `requires { strategy.prepare_deferred_model(...) }` instead, a
// misspelled or mistyped hook would silently build the whole model on every rank.
//
// What no concept can say, and where it is checked instead:
//   - Every rank issues the same collectives in the same order (the same hooks reach the same
//     collectives on every rank). Checked at run time: every collective of runtime::ProcessGroup
//     is numbered and compared across ranks (runtime/collective_check.hpp), and Zero3's units
//     are compared as each backward starts and ends (detail/unit_order_check.hpp).
//   - After the synchronising after_backward(sync = true), the gradients the optimizer steps with
//     (gradients_of) are the mean over the world of each rank's gradients, whatever the strategy
//     keeps them in. The Accelerator's divide_by_window_tokens relies on it (backward(loss_sum,
//     tokens) multiplies that mean by W / the window's tokens on every rank). Checked by the
//     distributed tests (tests/distributed/), which compare every strategy's steps with one
//     process's steps over the whole batch.
//
// Where the same information is a property of the policy (which state it shards), it is read
// from the policy's constants (policy/parallelism.hpp), not from the strategy's class.
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../detail/deferred_build.hpp"
#include "../options.hpp"
#include "../detail/memory_counter.hpp"
#include "memory_layout.hpp"
#include "placement.hpp"
#include "strategy.hpp"

namespace accel::runtime {
class ProcessGroup;
}

namespace accel::parallel {

// A checkpoint stores each parameter, and each piece of element-wise optimizer state, as
// flattened slices named by the element they start at, so that any strategy at any world size
// can read what any other wrote.
struct ParameterSlice {
  std::int64_t begin = 0;  // in the flattened parameter
  torch::Tensor data;      // 1-D, aliasing the live parameter (writable under NoGradGuard)
  Placement placement{};   // the parameter's place in the full tensor
};
// One parameter's state in the optimizer that holds it on this rank.
struct StateSlot {
  torch::optim::Optimizer* holder = nullptr;
  torch::Tensor key;        // the tensor `holder` keeps the state under
  std::size_t group = 0;    // where the parameter sits in the user's optimizer
  std::size_t index = 0;
  std::int64_t begin = 0;   // the slice of the flattened parameter this state covers
  std::int64_t numel = 0;
  Placement placement{};    // the parameter's place in the full tensor
};

// Optimizer hooks are templates on the user's optimizer type; AdamW stands for any of them.
template <class S>
concept TrainingStep = requires(S& s, runtime::ProcessGroup* group, const Options& options,
                                torch::nn::Module& module, const std::string& label,
                                torch::optim::AdamW& optimizer, const torch::Tensor& outputs,
                                bool sync) {
  s.attach(group, options);
  s.prepare_model(module, label);
  s.prepare_optimizer(optimizer);
  s.before_forward(module);
  s.after_forward(module, outputs);
  s.before_backward(sync);
  s.after_backward(sync);
  s.optimizer_step(optimizer);
  s.zero_grad(optimizer);
};

template <class S>
concept GradientAccess = requires(S& s, const std::vector<torch::Tensor>& parameters,
                                  const torch::optim::Optimizer& optimizer, torch::Tensor local,
                                  bool is_max) {
  { s.gradients_to_clip(parameters) } -> std::same_as<std::vector<torch::Tensor>>;
  { s.gradients_of(optimizer) } -> std::same_as<std::vector<torch::Tensor>>;
  { s.reduce_norm(local, is_max) } -> std::same_as<torch::Tensor>;
};

template <class S>
concept MemoryAccounting = requires(S& s, const S& held, state::MemoryCounter& counter,
                                    torch::nn::Module& module, const LayoutRequest& request) {
  { S::can_offload } -> std::convertible_to<bool>;
  { S::deferred_models } -> std::convertible_to<bool>;
  held.count_memory(counter);
  { S::memory_layout(module, request) } -> std::same_as<MemoryLayout>;
  s.gather_full(module);
  s.release_full(module);
};

template <class S>
concept CheckpointSlices = requires(S& s, const S& held, const torch::Tensor& parameter, int rank,
                                    torch::optim::Optimizer& user, bool saving,
                                    const std::vector<torch::Tensor>& gradients) {
  { held.parameter_shape(parameter) } -> std::same_as<std::vector<std::int64_t>>;
  { held.saved_slice(parameter, rank) } -> std::same_as<std::optional<ParameterSlice>>;
  { held.loaded_slice(parameter) } -> std::same_as<std::optional<ParameterSlice>>;
  { s.state_slots(user, saving, rank) } -> std::same_as<std::vector<StateSlot>>;
  { held.is_flattened(parameter) } -> std::same_as<bool>;
  { held.flat_gradients() } -> std::same_as<std::vector<torch::Tensor>>;
  s.restore_flat_gradients(gradients);
  s.after_state_loaded();
};

// The optional role: an empty build (accel::deferred_init) on more than one process, built by the
// strategy, which materializes only this rank's part from rank 0's generator state.
template <class S>
concept DeferredModels = requires(S& s, torch::nn::Module& module, const std::string& label,
                                  const torch::Device& device,
                                  const accel::detail::DeferredBuild& build,
                                  const torch::Tensor& generator_state) {
  s.prepare_deferred_model(module, label, device, build, generator_state);
};

// Whether the Accelerator hands an empty build to the strategy (false: it materializes the
// whole model on every rank and calls prepare_model).
template <class S>
inline constexpr bool builds_deferred_models = [] {
  if constexpr (requires { { S::deferred_models } -> std::convertible_to<bool>; })
    return static_cast<bool>(S::deferred_models) && DeferredModels<S>;
  else
    return false;
}();

template <class S>
concept StrategyContract =
    TrainingStep<S> && GradientAccess<S> && MemoryAccounting<S> && CheckpointSlices<S>;

// Asserts each role, one message per role, and returns whether all are met; g++ names the policy
// in the line before a message ("[with Par = MyPolicy]") and the missing member in the note after
// it. A policy with no specialization at all has already said so (strategy.hpp): once is enough.
template <class Par>
consteval bool strategy_meets_contract() {
  using S = Strategy<Par>;
  if constexpr (requires { typename S::not_specialized; }) {
    return false;
  } else {
    static_assert(TrainingStep<S>,
                  "accel: parallel::Strategy<Par> lacks a training-step hook; write all of "
                  "attach(runtime::ProcessGroup*, const Options&), prepare_model(torch::nn::Module&, "
                  "const std::string&), prepare_optimizer(Optimizer&), before_forward(Module&), "
                  "after_forward(Module&, const Outputs&), before_backward(bool sync), "
                  "after_backward(bool sync), optimizer_step(Optimizer&), zero_grad(Optimizer&) "
                  "(the note below names the missing one; docs/concepts/policies.md#writing-a-strategy)");
    static_assert(GradientAccess<S>,
                  "accel: parallel::Strategy<Par> lacks a gradient-access member; write "
                  "gradients_to_clip, gradients_of and reduce_norm, or derive from "
                  "accel::parallel::ReplicatedGradients (docs/concepts/policies.md#writing-a-strategy)");
    static_assert(MemoryAccounting<S>,
                  "accel: parallel::Strategy<Par> lacks a memory-accounting member; write "
                  "can_offload, deferred_models, count_memory, memory_layout, gather_full and "
                  "release_full, or derive from accel::parallel::WholeParameters "
                  "(docs/concepts/policies.md#writing-a-strategy)");
    static_assert(CheckpointSlices<S>,
                  "accel: parallel::Strategy<Par> lacks a checkpoint-slice member; write "
                  "parameter_shape, saved_slice, loaded_slice, state_slots, is_flattened, "
                  "flat_gradients, restore_flat_gradients and after_state_loaded, or derive from "
                  "accel::parallel::ReplicatedCheckpoint (docs/concepts/policies.md#writing-a-strategy)");
    if constexpr (MemoryAccounting<S>) {
      // One message for both ways the answer and the member can disagree.
      if constexpr (static_cast<bool>(S::deferred_models))
        static_assert(DeferredModels<S>,
                      "accel: parallel::Strategy<Par>'s deferred_models does not match its "
                      "prepare_deferred_model: deferred_models = true needs "
                      "prepare_deferred_model(torch::nn::Module&, const std::string&, const "
                      "torch::Device&, const accel::detail::DeferredBuild&, const torch::Tensor&) "
                      "(check its spelling and parameters: the note below names what fails), and "
                      "a strategy without that member says deferred_models = false "
                      "(docs/concepts/policies.md#writing-a-strategy)");
      else
        static_assert(!DeferredModels<S>,
                      "accel: parallel::Strategy<Par>'s deferred_models does not match its "
                      "prepare_deferred_model: deferred_models = true needs "
                      "prepare_deferred_model(torch::nn::Module&, const std::string&, const "
                      "torch::Device&, const accel::detail::DeferredBuild&, const torch::Tensor&) "
                      "(check its spelling and parameters: the note below names what fails), and "
                      "a strategy without that member says deferred_models = false "
                      "(docs/concepts/policies.md#writing-a-strategy)");
      return StrategyContract<S> && static_cast<bool>(S::deferred_models) == DeferredModels<S>;
    } else {
      return false;
    }
  }
}

}  // namespace accel::parallel
