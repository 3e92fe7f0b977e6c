// expect: accel: GradAccum<N> needs N >= 1
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
constexpr int micro_batches = 1;
#else
constexpr int micro_batches = 0;
#endif

int main() {
  [[maybe_unused]] Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<micro_batches>> accelerator;
}
