// expect: accel: prepare.. takes modules
#include <accel/accelerator.hpp>

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
  int not_preparable = 0;
  accelerator.prepare(not_preparable);
}
