// The precision hooks of a policy whose gradients need no scaling (Fp32, Bf16: bf16 has fp32's
// exponent range): the loss as it is, gradients as they are, every step runs.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "../detail/gradient_state.hpp"
#include "../options.hpp"
#include "../runtime/process_group.hpp"

namespace accel::precision {

struct WithoutLossScaling {
  // Nothing to save.
  struct state_type {};

  void attach(runtime::ProcessGroup* /*group*/, const Options& /*options*/,
              const torch::Device& /*device*/) {}
  void prepare_model(const std::shared_ptr<torch::nn::Module>& /*model*/,
                     const std::string& /*label*/) {}
  void on_backward(const detail::GradientState& /*gradients*/) {}
  torch::Tensor scale_loss(const torch::Tensor& loss) const { return loss; }
  double loss_scale() const { return 1.0; }
  template <class Strategy>
  void unscale(Strategy& /*strategy*/, torch::optim::Optimizer& /*optimizer*/) {}
  template <class Strategy>
  bool may_step(Strategy& /*strategy*/, torch::optim::Optimizer& /*optimizer*/) {
    return true;
  }
  bool step_was_skipped() const { return false; }
  state_type state() const { return {}; }
  void load_state(const state_type& /*state*/) {}
};

}  // namespace accel::precision
