// precision::Precision<Prec>: the behaviour of a precision policy around the training step. One
// specialization per policy (fp32.hpp, bf16.hpp, fp16.hpp, fp8.hpp); the primary template is a
// readable error for a policy nobody taught accel.
//
// Every specialization has these hooks, which the Accelerator calls in this order:
//
//   using state_type                    what a checkpoint saves of it (an aggregate)
//   void attach(ProcessGroup*, const Options&, const torch::Device&)
//                                       at construction: refuses what cannot run here
//   void prepare_model(const std::shared_ptr<torch::nn::Module>&, const std::string& label)
//                                       at prepare(), before activation checkpointing and the
//                                       strategy wrap the model: Fp8 reroutes its Linear layers
//   void on_backward(const detail::GradientState&)
//                                       first in every backward(): a window beginning fixes the
//                                       loss scale it will use
//   torch::Tensor scale_loss(const torch::Tensor& loss)
//                                       the loss backward() differentiates
//   double loss_scale()                 the factor scale_loss applies in this window (1: none)
//   void unscale(Strategy&, torch::optim::Optimizer&)
//                                       the optimizer's gradients on this rank back to their true
//                                       size, at most once per window (clip_grad_norm calls it
//                                       for every prepared optimizer, optimizer.step() for its own)
//   bool may_step(Strategy&, torch::optim::Optimizer&)
//                                       at optimizer.step() on the window's last micro-step:
//                                       unscales if not done yet, and says whether the step runs
//                                       (the same answer on every rank)
//   bool step_was_skipped()             whether a prepared optimizer's last step did not run
//   state_type state(); void load_state(const state_type&)
//
// Forward runs under precision::Autocast<Prec> (autocast.hpp), chosen by Prec::autocast.
#pragma once

#include "../detail/dependent_false.hpp"

namespace accel::precision {

template <class Prec>
struct Precision {
  static_assert(accel::detail::dependent_false<Prec>,
                "accel: no precision::Precision specialization for this precision policy; "
                "specialize accel::precision::Precision<YourPolicy> (deriving from "
                "accel::precision::WithoutLossScaling, or DynamicLossScaling) or use Fp32, Bf16, "
                "Fp16, Fp8");
};

}  // namespace accel::precision
