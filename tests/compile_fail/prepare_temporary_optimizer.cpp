// expect: accel: prepare.. keeps a pointer to the optimizer
#include <accel/accelerator.hpp>

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
  torch::nn::Linear net(2, 2);
  accelerator.prepare(torch::optim::SGD(net->parameters(), 0.1));
}
