// expect: accel: parallel::Strategy<Par> lacks a training-step hook
// A hook whose name is misspelled is not an override that silently never runs: there is no
// default for it to fall back on, so the training-step role is reported (and g++'s note names
// before_backward).
#include "training_loop.hpp"

struct MyPolicy {
  using category = accel::policy::parallelism_tag;
  static constexpr std::string_view name = "MyPolicy";
  static constexpr bool shards_optimizer_state = false;
  static constexpr bool shards_gradients = false;
  static constexpr bool shards_parameters = false;
};

template <>
struct accel::parallel::Strategy<MyPolicy> : accel::parallel::ReplicatedGradients,
                                            accel::parallel::WholeParameters,
                                            accel::parallel::ReplicatedCheckpoint {
  void attach(accel::runtime::ProcessGroup* /*group*/, const accel::Options& /*options*/) {}
  void prepare_model(torch::nn::Module& /*module*/, const std::string& /*label*/) {}
  template <class Optimizer>
  void prepare_optimizer(Optimizer& /*optimizer*/) {}
  void before_forward(torch::nn::Module& /*module*/) {}
  template <class Outputs>
  void after_forward(torch::nn::Module& /*module*/, const Outputs& /*outputs*/) {}
#ifdef ACCEL_TWIN
  void before_backward(bool /*sync*/) {}
#else
  void befor_backward(bool /*sync*/) {}
#endif
  void after_backward(bool /*sync*/) {}
  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    optimizer.step();
  }
  template <class Optimizer>
  void zero_grad(Optimizer& optimizer) {
    accel::parallel::zero_grad_in_place(optimizer);
  }
};

int main() { training_loop<accel::Accelerator<MyPolicy>>(); }
