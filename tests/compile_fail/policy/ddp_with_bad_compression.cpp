// expect: accel: DdpWith<C> takes a gradient compression as C
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::DdpWith<accel::CompressFp16>;
#else
using Parallelism = accel::DdpWith<accel::Fp16>;  // a precision, not a compression
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
