// expect: accel: tensor parallelism works with Ddp, Zero2, Zero3 and Fsdp<NoShard
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::Parallel<accel::Zero3, accel::TensorParallel<2>>;
#else
using Parallelism = accel::Parallel<accel::Fsdp<accel::HybridShard>, accel::TensorParallel<2>>;
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
