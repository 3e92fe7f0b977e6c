// expect: accel: Accelerator's third parameter is not an accel policy
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Accumulation = accel::GradAccum<4>;
#else
using Accumulation = int;  // meant as the number of steps
#endif

int main() { [[maybe_unused]] Accelerator<accel::Ddp, accel::Bf16, Accumulation> accelerator; }
