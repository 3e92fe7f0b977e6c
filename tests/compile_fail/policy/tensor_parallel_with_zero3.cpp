// expect: accel: tensor parallelism works with Ddp across the tensor-parallel groups so far
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::Parallel<accel::Ddp, accel::TensorParallel<2>>;
#else
using Parallelism = accel::Parallel<accel::Zero3, accel::TensorParallel<2>>;  // not yet
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
