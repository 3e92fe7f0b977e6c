// A user's program: one include, one alias, one training step.
#include <accel/accelerator.hpp>

int main() {
  accel::Accelerator<accel::Ddp, accel::Fp32> accelerator;
  torch::nn::Linear net(4, 1);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  accelerator.backward(model(torch::ones({2, 4})).sum());
  optimizer.step();
  fmt::print("consumer ok, accel {}\n", ACCEL_VERSION);
}
