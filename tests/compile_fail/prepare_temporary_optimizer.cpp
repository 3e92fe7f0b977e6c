// expect: accel: prepare.. keeps a pointer to the optimizer
#include <accel/accelerator.hpp>

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
  torch::nn::Linear net(2, 2);
#ifdef ACCEL_TWIN
  torch::optim::SGD sgd(net->parameters(), 0.1);
  accelerator.prepare(sgd);
#else
  accelerator.prepare(torch::optim::SGD(net->parameters(), 0.1));
#endif
}
