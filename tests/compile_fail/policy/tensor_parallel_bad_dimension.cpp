// expect: accel: Parallel<P, D> takes TensorParallel<N> as D
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::Parallel<accel::Ddp, accel::TensorParallel<2>>;
#else
using Parallelism = accel::Parallel<accel::Ddp, accel::Bf16>;  // a precision, not a dimension
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
