// A distributed strategy written the way a user would write one, from docs/concepts/policies.md
// ("Writing a policy", "Writing a strategy") and include/accel/parallel/contract.hpp alone: Ddp
// without buckets, every gradient all-reduced on its own after the synchronising backward.
// worker.cpp trains it against one process on the global batch, as it does accel's Ddp.
#pragma once

#include <accel/accelerator.hpp>

#include <string>
#include <string_view>

namespace accel_test {

struct UnbucketedDdp {
  using category = accel::policy::parallelism_tag;
  static constexpr std::string_view name = "UnbucketedDdp";
  static constexpr bool shards_optimizer_state = false;
  static constexpr bool shards_gradients = false;
  static constexpr bool shards_parameters = false;
};

}  // namespace accel_test

// Every rank holds everything: the three bases take the gradient, memory and checkpoint roles;
// the training step is the strategy's own.
template <>
struct accel::parallel::Strategy<accel_test::UnbucketedDdp> : accel::parallel::ReplicatedGradients,
                                                              accel::parallel::WholeParameters,
                                                              accel::parallel::ReplicatedCheckpoint {
  accel::runtime::ProcessGroup* group = nullptr;  // none on one process
  torch::nn::Module* model = nullptr;

  void attach(accel::runtime::ProcessGroup* g, const accel::Options&) { group = g; }
  // Every rank starts from rank 0's weights.
  void prepare_model(torch::nn::Module& m, const std::string&) {
    model = &m;
    if (group == nullptr) return;
    torch::NoGradGuard no_grad;
    for (auto& p : m.parameters()) group->broadcast(p, 0);
  }
  template <class Optimizer>
  void prepare_optimizer(Optimizer&) {}
  void before_forward(torch::nn::Module&) {}
  template <class Outputs>
  void after_forward(torch::nn::Module&, const Outputs&) {}
  void before_backward(bool) {}
  // The contract's obligation: after the synchronising backward the gradients are the mean over
  // the world; the same all-reduces, in the same order, on every rank.
  void after_backward(bool sync) {
    if (!sync || group == nullptr || model == nullptr) return;
    for (auto& p : model->parameters()) {
      if (!p.requires_grad()) continue;
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      group->allreduce(p.mutable_grad());
      p.mutable_grad().div_(group->size());
    }
  }
  template <class Optimizer>
  void optimizer_step(Optimizer& o) {
    o.step();
  }
  template <class Optimizer>
  void zero_grad(Optimizer& o) {
    accel::parallel::zero_grad_in_place(o);
  }
};
