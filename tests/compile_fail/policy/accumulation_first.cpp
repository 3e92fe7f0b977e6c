// expect: accel: Accelerator's first parameter is the parallelism policy, but GradAccum was given there
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::Ddp;
#else
using Parallelism = accel::GradAccum<4>;
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
