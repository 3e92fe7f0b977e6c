// Fsdp<Sharding>: PyTorch FSDP's sharding strategies. NO_SHARD is DDP; the sharded ones run on
// one process only in this version (parallel/local.hpp).
#pragma once

#include "../policy/parallelism.hpp"
#include "ddp.hpp"
#include "local.hpp"

namespace accel::parallel {

template <>
struct Strategy<Fsdp<NoShard>> : Strategy<Ddp> {};

template <>
struct Strategy<Fsdp<FullShard>> : SingleProcessOnly<Fsdp<FullShard>> {};

template <>
struct Strategy<Fsdp<ShardGradOp>> : SingleProcessOnly<Fsdp<ShardGradOp>> {};

template <>
struct Strategy<Fsdp<HybridShard>> : SingleProcessOnly<Fsdp<HybridShard>> {};

}  // namespace accel::parallel
