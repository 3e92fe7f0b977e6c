// expect: accel: prepare.. keeps a pointer to the scheduler
#include <accel/accelerator.hpp>

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
  torch::nn::Linear net(2, 2);
  torch::optim::SGD sgd(net->parameters(), 0.1);
#ifdef ACCEL_TWIN
  torch::optim::StepLR schedule(sgd, 1);
  accelerator.prepare(schedule);
#else
  accelerator.prepare(torch::optim::StepLR(sgd, 1));
#endif
}
