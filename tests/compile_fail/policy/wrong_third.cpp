// expect: accel: Accelerator's third parameter is the accumulation policy
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Accumulation = accel::GradAccum<4>;
#else
using Accumulation = accel::Fp16;
#endif

int main() { [[maybe_unused]] Accelerator<accel::Ddp, accel::Bf16, Accumulation> accelerator; }
