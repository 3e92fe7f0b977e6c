// Fsdp<Sharding>: PyTorch FSDP's sharding strategies. NO_SHARD is DDP, SHARD_GRAD_OP is ZeRO-2
// (zero2.hpp) and FULL_SHARD is ZeRO-3 (zero3.hpp); HYBRID_SHARD runs on one process only in this
// version (parallel/local.hpp).
#pragma once

#include "../policy/parallelism.hpp"
#include "ddp.hpp"
#include "local.hpp"
#include "zero2.hpp"
#include "zero3.hpp"

namespace accel::parallel {

template <>
struct Strategy<Fsdp<NoShard>> : Strategy<Ddp> {};

template <>
struct Strategy<Fsdp<FullShard>> : FullyShardedStrategy {
  Strategy() : FullyShardedStrategy("Fsdp<FullShard>") {}
};

// Gradients and optimizer state sharded: Zero2's implementation. PyTorch's SHARD_GRAD_OP also
// drops the full parameters between a backward and the next forward; that lowers memory at rest,
// not the peak (they are whole through forward and backward), and here they stay whole.
template <>
struct Strategy<Fsdp<ShardGradOp>> : ShardedGradientStrategy {
  Strategy() : ShardedGradientStrategy("Fsdp<ShardGradOp>") {}
};

template <>
struct Strategy<Fsdp<HybridShard>> : SingleProcessOnly<Fsdp<HybridShard>> {};

}  // namespace accel::parallel
