// Fsdp<Sharding>: PyTorch FSDP's sharding strategies. NO_SHARD is DDP, SHARD_GRAD_OP is ZeRO-2
// (zero2.hpp), FULL_SHARD is ZeRO-3 (zero3.hpp), and HYBRID_SHARD is FULL_SHARD within each node.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>

#include "../detail/error.hpp"
#include "../policy/parallelism.hpp"
#include "../runtime/process_group.hpp"
#include "ddp.hpp"
#include "zero2.hpp"
#include "zero3.hpp"

namespace accel::parallel {

template <>
struct Strategy<Fsdp<NoShard>> : Strategy<Ddp> {
  Strategy() { name_ = Fsdp<NoShard>::name; }
};

template <>
struct Strategy<Fsdp<FullShard>> : FullyShardedStrategy {
  Strategy() : FullyShardedStrategy(Fsdp<FullShard>::name) {}
};

// Gradients and optimizer state sharded: Zero2's implementation. PyTorch's SHARD_GRAD_OP also
// drops the full parameters between a backward and the next forward; that lowers memory at rest,
// not the peak (they are whole through forward and backward), and here they stay whole.
template <>
struct Strategy<Fsdp<ShardGradOp>> : ShardedGradientStrategy {
  Strategy() : ShardedGradientStrategy(Fsdp<ShardGradOp>::name) {}
};

// HYBRID_SHARD: FULL_SHARD within each node, replicated across the nodes. The parameters,
// gradients and optimizer state split across one node's ranks only, so the all-gathers stay in
// the node (shared memory here); after a unit's reduce-scatter within the node its shard
// gradient is averaged across the nodes, between the ranks of the same local rank. A node is
// LOCAL_WORLD_SIZE consecutive ranks, as accel-launch, torchrun and Slurm number them; on one
// node this is FullShard.
template <>
struct Strategy<Fsdp<HybridShard>> : FullyShardedStrategy {
  Strategy() : FullyShardedStrategy(Fsdp<HybridShard>::name) {}

  void attach(runtime::ProcessGroup* group, const Options& options) {
    FullyShardedStrategy::attach(group, options);
    if (group == nullptr || group->local_size() == group->size()) return;
    check_nodes(*group);
    node_ = group->split("node", group->rank() / group->local_size(), /*same_host=*/true);
    across_ = group->split("replica", group->local_rank(), /*same_host=*/false);
    shard_within(node_.get(), across_.get());
  }

  // estimate_memory's question: FullShard's layout over one node's ranks
  // (request.ranks_per_node; 0: one node, the whole world).
  static MemoryLayout memory_layout(torch::nn::Module& model, LayoutRequest request) {
    if (request.ranks_per_node < 0 ||
        (request.ranks_per_node > 0 && request.world_size % request.ranks_per_node != 0))
      accel::detail::fail("estimate_memory: ranks_per_node is {}; it must divide world_size {} "
                          "(0: one node)",
                          request.ranks_per_node, request.world_size);
    if (request.ranks_per_node > 0) {
      request.world_size = request.ranks_per_node;
      request.rank %= request.ranks_per_node;
    }
    return FullyShardedStrategy::memory_layout(model, request);
  }

  // The ranks that share this rank's shards (its node), and the other nodes' ranks holding the
  // same shards; null on one node.
  const runtime::ProcessGroup* node_group() const { return node_.get(); }
  const runtime::ProcessGroup* replica_group() const { return across_.get(); }

 private:
  // Every rank must see the same node size, and be rank % size within its node.
  static void check_nodes(runtime::ProcessGroup& group) {
    const auto seen = group.allgather_bytes(fmt::format("{} {}", group.local_rank(), group.local_size()));
    for (int r = 0; r < group.size(); ++r) {
      const std::string expected = fmt::format("{} {}", r % group.local_size(), group.local_size());
      if (seen[static_cast<std::size_t>(r)] != expected || group.size() % group.local_size() != 0)
        accel::detail::fail(
            "Fsdp<HybridShard> shards within nodes of LOCAL_WORLD_SIZE consecutive ranks, and "
            "rank {} of {} has LOCAL_RANK and LOCAL_WORLD_SIZE '{}' where '{}' fits "
            "LOCAL_WORLD_SIZE {}: start every node with the same number of processes "
            "(accel-launch --nproc, torchrun --nproc-per-node), numbered node by node",
            r, group.size(), seen[static_cast<std::size_t>(r)], expected, group.local_size());
    }
  }

  std::unique_ptr<runtime::ProcessGroup> node_, across_;
};

}  // namespace accel::parallel
