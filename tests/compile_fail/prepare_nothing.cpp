// expect: accel: prepare.. needs at least one object
#include <accel/accelerator.hpp>

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
  torch::nn::Linear net(2, 2);
#ifdef ACCEL_TWIN
  accelerator.prepare(net);
#else
  accelerator.prepare();
#endif
}
