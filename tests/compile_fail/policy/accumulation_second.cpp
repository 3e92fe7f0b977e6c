// expect: accel: Accelerator's second parameter is the precision policy, but GradAccum was given there
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Precision = accel::Fp32;
#else
using Precision = accel::GradAccum<4>;
#endif

int main() { [[maybe_unused]] Accelerator<accel::Ddp, Precision> accelerator; }
