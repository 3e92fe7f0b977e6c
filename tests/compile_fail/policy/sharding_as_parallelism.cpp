// expect: accel: a sharding strategy .FullShard, ShardGradOp, NoShard, HybridShard. is an argument of Fsdp
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::Fsdp<accel::FullShard>;
#else
using Parallelism = accel::FullShard;
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
