// expect: accel: parallel::Strategy<Par> lacks a gradient-access member
// expect: accel: parallel::Strategy<Par> lacks a memory-accounting member
// expect: accel: parallel::Strategy<Par> lacks a checkpoint-slice member
// A strategy that writes the training step and nothing else: each role it lacks is named, and
// nothing else is reported. The twin takes the three from the replicated bases.
#include "training_loop.hpp"

struct MyPolicy {
  using category = accel::policy::parallelism_tag;
  static constexpr std::string_view name = "MyPolicy";
  static constexpr bool shards_optimizer_state = false;
  static constexpr bool shards_gradients = false;
  static constexpr bool shards_parameters = false;
};

template <>
struct accel::parallel::Strategy<MyPolicy>
#ifdef ACCEL_TWIN
    : accel::parallel::ReplicatedGradients,
      accel::parallel::WholeParameters,
      accel::parallel::ReplicatedCheckpoint
#endif
{
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
