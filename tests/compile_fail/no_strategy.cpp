// expect: accel: no parallel::Strategy specialization for this parallelism policy
// A complete parallelism policy of the user's own that nobody taught accel: the Accelerator's
// strategy, parallel::Strategy<MyPolicy>, is the primary template. The twin teaches it: a
// strategy that meets the whole contract (parallel/contract.hpp), taking three roles from the
// replicated bases and writing the training step, as docs/concepts/policies.md#writing-a-strategy shows.
#include "training_loop.hpp"

struct MyPolicy {
  using category = accel::policy::parallelism_tag;
  static constexpr std::string_view name = "MyPolicy";
  static constexpr bool shards_optimizer_state = false;
  static constexpr bool shards_gradients = false;
  static constexpr bool shards_parameters = false;
};

#ifdef ACCEL_TWIN
template <>
struct accel::parallel::Strategy<MyPolicy> : accel::parallel::ReplicatedGradients,
                                            accel::parallel::WholeParameters,
                                            accel::parallel::ReplicatedCheckpoint {
  void attach(accel::runtime::ProcessGroup* group, const accel::Options& /*options*/) {
    if (group != nullptr) throw std::runtime_error("MyPolicy trains on one process");
  }
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
#endif

int main() { training_loop<accel::Accelerator<MyPolicy>>(); }
