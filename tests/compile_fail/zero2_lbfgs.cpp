// expect: accel: Zero2, Zero3 and Fsdp shard optimizer state by building the same optimizer type over each rank's shard, which is exact only for element-wise optimizers
#include <accel/accelerator.hpp>

// LBFGS is not element-wise (its line search and curvature pairs span all parameters): Zero2
// refuses it at compile time; its twin prepares an Adam.
int main() {
  accel::Accelerator<accel::Zero2> accelerator;
  torch::nn::Linear net(2, 2);
#ifdef ACCEL_TWIN
  torch::optim::Adam adam(net->parameters());
  auto [model, optimizer] = accelerator.prepare(net, adam);
#else
  torch::optim::LBFGS lbfgs(net->parameters());
  auto [model, optimizer] = accelerator.prepare(net, lbfgs);
#endif
}
