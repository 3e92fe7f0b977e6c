// What a precision::Precision<Prec> must provide, as three concepts, one per role, and the check
// the Accelerator runs before anything calls it. The Accelerator calls them in this order:
//
//   PrecisionSetup    attach(ProcessGroup*, const Options&, const torch::Device&) at
//                     construction (refuses what cannot run here); prepare_model(model, label) at
//                     prepare(), before activation checkpointing and the strategy wrap the model
//                     (Fp8 reroutes its Linear layers there)
//   LossScalingHooks  on_backward(WindowPosition) first in every backward() (a window beginning
//                     fixes the loss scale it uses); scale_loss(loss), the loss backward()
//                     differentiates; loss_scale(), the factor it applies (1: none);
//                     unscale(strategy, optimizer), the optimizer's gradients back to their true
//                     size, at most once per window (clip_grad_norm calls it for every prepared
//                     optimizer, optimizer.step() for its own); may_step(strategy, optimizer), on
//                     the window's last micro-step: unscales if not done yet and says whether the
//                     step runs, the same answer on every rank; step_was_skipped()
//   PrecisionState    state_type, state(), check_state(state) (throws what load_state would
//                     refuse, changing nothing), load_state(state); and the state_type written
//                     to and read from a checkpoint's manifest by to_json / from_json found by
//                     argument-dependent lookup, templates on the JSON type so that the
//                     precision's header needs no JSON library (grad_scaler.hpp, fp8.hpp)
//
// A specialization writes PrecisionSetup itself and takes the other two whole from
// WithoutLossScaling or DynamicLossScaling, or writes them (Fp8 does): no per-hook defaults, so
// a misspelled or forgotten hook is a compile-time error naming its role, with g++'s note naming
// the member.
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <memory>
#include <string>
#include <utility>

#include "../options.hpp"
#include "../parallel/replicated.hpp"
#include "precision.hpp"

namespace accel::runtime {
class ProcessGroup;
}

namespace accel::precision {

namespace contract_detail {
// Stands for nlohmann::json in the check of to_json / from_json, which must be templates.
struct AnyJson {};
}  // namespace contract_detail

template <class P>
concept PrecisionSetup = requires(P& p, runtime::ProcessGroup* group, const Options& options,
                                  const torch::Device& device,
                                  const std::shared_ptr<torch::nn::Module>& model,
                                  const std::string& label) {
  p.attach(group, options, device);
  p.prepare_model(model, label);
};

// ReplicatedGradients stands for the strategy, whose gradients_of the hooks read.
template <class P>
concept LossScalingHooks = requires(P& p, const P& held, WindowPosition position,
                                    const torch::Tensor& loss,
                                    parallel::ReplicatedGradients& strategy,
                                    torch::optim::Optimizer& optimizer) {
  p.on_backward(position);
  { held.scale_loss(loss) } -> std::same_as<torch::Tensor>;
  { held.loss_scale() } -> std::convertible_to<double>;
  p.unscale(strategy, optimizer);
  { p.may_step(strategy, optimizer) } -> std::same_as<bool>;
  { held.step_was_skipped() } -> std::same_as<bool>;
};

template <class P>
concept PrecisionState = requires(P& p, const P& held, const typename P::state_type& state,
                                  typename P::state_type& read, contract_detail::AnyJson& json) {
  { held.state() } -> std::same_as<typename P::state_type>;
  held.check_state(state);
  p.load_state(state);
  to_json(json, state);
  from_json(std::as_const(json), read);
};

template <class P>
concept PrecisionContract = PrecisionSetup<P> && LossScalingHooks<P> && PrecisionState<P>;

// Asserts each role, one message per role, and returns whether all are met; g++ names the policy
// in the line before a message ("[with Prec = MyPrecision]") and the missing member in the note
// after it. A policy with no specialization at all has already said so (precision.hpp).
template <class Prec>
consteval bool precision_meets_contract() {
  using P = Precision<Prec>;
  if constexpr (requires { typename P::not_specialized; }) {
    return false;
  } else {
    static_assert(PrecisionSetup<P>,
                  "accel: precision::Precision<Prec> lacks a setup hook; write both "
                  "attach(runtime::ProcessGroup*, const Options&, const torch::Device&) and "
                  "prepare_model(const std::shared_ptr<torch::nn::Module>&, const std::string&) "
                  "(the note below names the missing one; docs/concepts/policies.md#writing-a-precision)");
    static_assert(LossScalingHooks<P>,
                  "accel: precision::Precision<Prec> lacks a loss-scaling hook; write on_backward, "
                  "scale_loss, loss_scale, unscale, may_step and step_was_skipped, or derive from "
                  "accel::precision::WithoutLossScaling or DynamicLossScaling "
                  "(docs/concepts/policies.md#writing-a-precision)");
    static_assert(PrecisionState<P>,
                  "accel: precision::Precision<Prec> lacks part of its checkpoint state; write "
                  "state_type, state, check_state, load_state and to_json / from_json templates "
                  "for state_type, or derive from accel::precision::WithoutLossScaling or "
                  "DynamicLossScaling (docs/concepts/policies.md#writing-a-precision)");
    return PrecisionContract<P>;
  }
}

}  // namespace accel::precision
