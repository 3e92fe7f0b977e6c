// expect: accel: Accelerator's second parameter is the precision policy, but a parallelism policy was given there
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Precision = accel::Bf16;
#else
using Precision = accel::Zero2;
#endif

int main() { [[maybe_unused]] Accelerator<accel::Ddp, Precision> accelerator; }
