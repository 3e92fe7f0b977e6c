// expect: accel: an accumulation policy's steps must be at least 1
// Before, this compiled as Accelerator<Ddp, Fp32, GradAccum<1>>.
#include "accelerator.hpp"

struct MyAccumulation {
  using category = accel::policy::accumulation_tag;
#ifdef ACCEL_TWIN
  static constexpr int steps = 1;
#else
  static constexpr int steps = 0;
#endif
};

int main() { [[maybe_unused]] Accelerator<accel::Ddp, accel::Fp32, MyAccumulation> accelerator; }
