// expect: accel: parallel::Strategy<Par>'s deferred_models does not match its prepare_deferred_model
// A strategy that says it builds empty models itself (deferred_models = true) with the hook
// misspelled: the role is declared, so the near miss is an error, not a silent fallback to
// building the whole model on every rank. The twin spells it right.
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
  static constexpr bool deferred_models = true;
#ifdef ACCEL_TWIN
  void prepare_deferred_model(torch::nn::Module& /*module*/, const std::string& /*label*/,
#else
  void prepare_deferred_modle(torch::nn::Module& /*module*/, const std::string& /*label*/,
#endif
                              const torch::Device& /*device*/,
                              const accel::detail::DeferredBuild& /*build*/,
                              const torch::Tensor& /*generator_state*/) {
    throw std::runtime_error("MyPolicy trains on one process");
  }
  void attach(accel::runtime::ProcessGroup* /*group*/, const accel::Options& /*options*/) {}
  void prepare_model(torch::nn::Module& /*module*/, const std::string& /*label*/) {}
  template <class Optimizer>
  void prepare_optimizer(Optimizer& /*optimizer*/) {}
  void before_forward(torch::nn::Module& /*module*/) {}
  template <class Outputs>
  void after_forward(torch::nn::Module& /*module*/, const Outputs& /*outputs*/) {}
  void before_backward(bool /*sync*/) {}
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
