// What estimate_memory (memory/estimate_memory.hpp) asks a strategy, and what the strategy
// answers: the flat parameters it would build for a model (one per bucket for Zero2, one per
// unit and dtype for Zero3) and the ranks a shard splits across (a node, for Fsdp<HybridShard>).
// Each strategy answers for itself, with the grouping its prepare() uses (the contract's
// MemoryAccounting role, parallel/contract.hpp: `static MemoryLayout memory_layout(...)`), so
// that the estimate never repeats a strategy's rules. How the bytes follow from a layout is
// memory/memory_formulas.hpp's.
//
// No torch and no {fmt} here: accel-launch estimate-memory uses the formulas over these types.
#pragma once

#include <cstdint>
#include <vector>

namespace accel::parallel {

// What a strategy shards, read from its policy's constants: Ddp and Fsdp<NoShard> nothing, Zero2
// and Fsdp<ShardGradOp> gradients and optimizer state, Zero3 and Fsdp<FullShard> parameters too.
enum class Sharding { replicated, gradients_and_state, everything };

// One flat parameter: trainable parameters of one dtype in one group (a bucket for Zero2, a unit
// for Zero3).
struct FlatGroup {
  std::int64_t numel = 0;
  std::int64_t element_size = 4;
  int unit = 0;  // Zero3: the unit it belongs to (backward_extra takes the largest unit)
};

// The question: which world, which rank, and the options that shape the groups.
struct LayoutRequest {
  int world_size = 1;
  int rank = 0;
  int ranks_per_node = 0;        // Fsdp<HybridShard>: a node's ranks; 0: one node
  double first_bucket_mb = 1.0;  // Zero2: Options::zero2's bucket caps
  double bucket_mb = 25.0;
};

// The answer: the trainable flats, the bytes of frozen parameters (never flattened: replicated,
// no gradient, no state), and the ranks a shard splits across with this rank's place among them.
struct MemoryLayout {
  std::vector<FlatGroup> flats;
  std::int64_t frozen_bytes = 0;
  int shard_world = 1;
  int shard_rank = 0;
};

}  // namespace accel::parallel
