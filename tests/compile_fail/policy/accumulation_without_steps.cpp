// expect: accel: a type tagged as an accumulation policy .category = accel::policy::accumulation_tag. has no `static constexpr int steps`
// Tagged but incomplete: before, this compiled as Accelerator<Ddp, Fp32, GradAccum<1>>.
#include "accelerator.hpp"

struct MyAccumulation {
  using category = accel::policy::accumulation_tag;
#ifdef ACCEL_TWIN
  static constexpr int steps = 4;
#endif
};

int main() { [[maybe_unused]] Accelerator<accel::Ddp, accel::Fp32, MyAccumulation> accelerator; }
