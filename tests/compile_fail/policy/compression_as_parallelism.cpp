// expect: accel: a gradient compression .CompressFp16, CompressBf16. is an argument of DdpWith
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::DdpWith<accel::CompressFp16>;
#else
using Parallelism = accel::CompressFp16;
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
