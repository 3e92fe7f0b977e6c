// Two roles of the precision contract (contract.hpp) for a policy whose gradients need no
// scaling (Fp32, Bf16: bf16 has fp32's exponent range): the loss as it is, gradients as they are,
// every step runs, and nothing to save.
#pragma once

#include <torch/torch.h>

#include "precision.hpp"

namespace accel::precision {

struct WithoutLossScaling {
  struct state_type {
    // An empty object in the manifest.
    template <class Json>
    friend void to_json(Json& json, const state_type& /*state*/) {
      json = Json::object();
    }
    template <class Json>
    friend void from_json(const Json& /*json*/, state_type& /*state*/) {}
  };

  void on_backward(WindowPosition /*position*/) {}
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
  void check_state(const state_type& /*state*/) const {}
  void load_state(const state_type& /*state*/) {}
};

}  // namespace accel::precision
