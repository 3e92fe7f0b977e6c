// expect: accel: a sharding strategy .FullShard, ShardGradOp, NoShard, HybridShard. is an argument of Fsdp
#include <accel/accelerator.hpp>

int main() { accel::Accelerator<accel::FullShard> accelerator; }
