// expect: accel: TensorParallel<N> is the second dimension of Parallel
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::Parallel<accel::Ddp, accel::TensorParallel<2>>;
#else
using Parallelism = accel::TensorParallel<2>;
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
