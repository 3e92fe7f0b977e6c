// expect: accel: Accelerator's first parameter is the parallelism policy, but a precision policy
// expect: accel: Accelerator's second parameter is the precision policy, but a parallelism policy
// expect: accel: these policies do not compose into an Accelerator
// The real Accelerator, end to end: both broken rules are reported, then the last line, and
// nothing else (the policy/ cases check each rule without torch).
#include <accel/accelerator.hpp>

int main() {
#ifdef ACCEL_TWIN
  accel::Accelerator<accel::Ddp, accel::Bf16> accelerator;
#else
  accel::Accelerator<accel::Bf16, accel::Ddp> accelerator;
#endif
}
