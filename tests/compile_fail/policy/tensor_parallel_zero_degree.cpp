// expect: accel: TensorParallel<N> needs N >= 1
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::Parallel<accel::Ddp, accel::TensorParallel<2>>;
#else
using Parallelism = accel::Parallel<accel::Ddp, accel::TensorParallel<0>>;
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
