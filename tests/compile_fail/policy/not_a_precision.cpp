// expect: accel: Accelerator's second parameter is not an accel policy
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Precision = accel::Bf16;
#else
using Precision = float;
#endif

int main() { [[maybe_unused]] Accelerator<accel::Ddp, Precision> accelerator; }
