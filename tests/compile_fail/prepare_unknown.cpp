// expect: accel: prepare.. takes modules
#include <accel/accelerator.hpp>

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
  torch::nn::Linear net(2, 2);
  int not_preparable = 0;
#ifdef ACCEL_TWIN
  accelerator.prepare(net);
  (void)not_preparable;
#else
  accelerator.prepare(not_preparable);
#endif
}
