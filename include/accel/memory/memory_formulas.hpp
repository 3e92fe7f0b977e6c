// What one rank holds for training, in bytes, by the ZeRO paper's formulas with the padding accel's
// flat parameters use (parallel/flat_parameter.hpp): a flat parameter of n elements is
// padded to P = ceil(n / W) x W so that it splits into W equal shards of S = P / W; the padding
// sits at the end, so rank r's shard holds R_r = clamp(n - r x S, 0, S) real elements. The
// optimizer over the shard keeps state for real elements only (its pieces skip the padding).
//
//   per flat of n elements of b bytes, K state tensors per element (Adam 2):
//                      parameters   gradients   optimizer state
//   replicated (Ddp)   n b          n b         K n b
//   Zero2              P b          S b         K R_r b
//   Zero3              S b          S b         K R_r b
//
// Zero2's flats are its gradient buckets (Options::zero2), in the order backward fills them.
//
// At rest, between steps: what Accelerator::memory_use() counts. While backward runs a rank
// holds more (backward_extra): Zero2 the full padded gradients of the bucket backward is filling
// and of the F whose reduce-scatter is in flight (Options::zero2.reduce_scatters_in_flight): the
// largest F + 1 consecutive buckets; in the micro-steps of a GradAccum window before its last,
// the full gradient of every bucket;
// Zero3 each unit's gathered parameters and full gradient (2 P b) while that unit runs, and its
// root unit's throughout. On one process every strategy is replicated (nothing to shard across).
//
// No torch and no {fmt} here: accel-launch estimate-memory uses it too.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "../detail/optimizer_table.hpp"
#include "../parallel/memory_layout.hpp"

namespace accel::memory {

// How many state tensors of a parameter's size the optimizer keeps with its default options
// (the optimizer table's count; none known for `other`).
inline constexpr int state_tensors_per_parameter(OptimizerKind kind) {
  const auto* row = accel::detail::known_optimizer(kind);
  return row != nullptr ? row->estimated_state : 0;
}

// What a strategy shards, and one flat parameter of its layout (parallel/memory_layout.hpp).
using parallel::FlatGroup;
using parallel::Sharding;

inline constexpr std::optional<Sharding> sharding_of(std::string_view strategy) {
  if (strategy == "ddp" || strategy == "fsdp-no-shard") return Sharding::replicated;
  if (strategy == "zero2" || strategy == "fsdp-shard-grad-op") return Sharding::gradients_and_state;
  if (strategy == "zero3" || strategy == "fsdp-full-shard" || strategy == "fsdp-hybrid-shard")
    return Sharding::everything;  // the hybrid one within a node
  return std::nullopt;
}

struct MemoryEstimate {
  std::int64_t parameters = 0;       // bytes on this rank, at rest
  std::int64_t gradients = 0;
  std::int64_t optimizer_state = 0;
  std::int64_t activations = 0;      // what the autograd graph keeps after a forward (measured)
  std::int64_t backward_extra = 0;   // at least this much more while backward runs (see above)
  // Host memory of a background save's snapshot (save_state(SaveMode::async)): this rank's file,
  // its share of the parameters and optimizer state (Ddp: rank 0 all of it); 0 unless asked.
  std::int64_t checkpoint_snapshot = 0;
  std::int64_t total() const {
    return parameters + gradients + optimizer_state + activations + checkpoint_snapshot;
  }
};

// Zero2's buckets for a model known only by its parameter count (accel-launch estimate-memory):
// the first of first_mb, the others of rest_mb, cut at the cap exactly (a real model's buckets
// close at the first parameter that reaches the cap, so they are a little larger).
inline std::vector<FlatGroup> buckets_of_count(std::int64_t numel, std::int64_t element_size,
                                               double first_mb, double rest_mb) {
  std::vector<FlatGroup> buckets;
  for (std::int64_t left = numel; left > 0;) {
    const double cap = buckets.empty() ? first_mb : rest_mb;
    const auto fits = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(cap * 1048576.0) / element_size);
    const std::int64_t n = std::min(left, fits);
    buckets.push_back({n, element_size, static_cast<int>(buckets.size())});
    left -= n;
  }
  return buckets;
}

// Rank `rank` of `world` under `sharding`, for trainable flats `flats` and `frozen_bytes` of
// parameters that need no gradient (never flattened: replicated, no gradient, no state).
// async_checkpoint: the snapshot of a background save too (checkpoint_snapshot).
inline MemoryEstimate estimate_flats(Sharding sharding, const std::vector<FlatGroup>& flats,
                                     std::int64_t frozen_bytes, int world, int rank,
                                     OptimizerKind optimizer, int zero2_in_flight = 0,
                                     bool async_checkpoint = false) {
  MemoryEstimate e;
  const std::int64_t k = state_tensors_per_parameter(optimizer);
  e.parameters = frozen_bytes;
  if (world <= 1) sharding = Sharding::replicated;
  std::vector<std::int64_t> unit_bytes, bucket_bytes;
  for (const auto& flat : flats) {
    const std::int64_t b = flat.element_size, n = flat.numel;
    const std::int64_t padded = (n + world - 1) / world * world, shard = padded / world;
    const std::int64_t real = std::clamp<std::int64_t>(n - rank * shard, 0, shard);
    switch (sharding) {
      case Sharding::replicated:
        e.parameters += n * b;
        e.gradients += n * b;
        e.optimizer_state += k * n * b;
        if (rank == 0) e.checkpoint_snapshot += (1 + k) * n * b;  // rank 0 saves it all
        break;
      case Sharding::gradients_and_state:
        e.parameters += padded * b;
        e.gradients += shard * b;
        e.optimizer_state += k * real * b;
        e.checkpoint_snapshot += (1 + k) * real * b;  // each rank its slice
        bucket_bytes.push_back(padded * b);
        break;
      case Sharding::everything:
        e.parameters += shard * b;
        e.gradients += shard * b;
        e.optimizer_state += k * real * b;
        e.checkpoint_snapshot += (1 + k) * real * b;
        if (unit_bytes.size() <= static_cast<std::size_t>(flat.unit))
          unit_bytes.resize(static_cast<std::size_t>(flat.unit) + 1, 0);
        unit_bytes[static_cast<std::size_t>(flat.unit)] += 2 * padded * b;
        break;
    }
  }
  if (rank == 0) e.checkpoint_snapshot += frozen_bytes;
  if (!async_checkpoint) e.checkpoint_snapshot = 0;
  if (!unit_bytes.empty()) e.backward_extra = *std::max_element(unit_bytes.begin(), unit_bytes.end());
  // Zero2: the bucket filling and those in flight.
  const std::size_t held_buckets = static_cast<std::size_t>(std::max(0, zero2_in_flight)) + 1;
  for (std::size_t first = 0; first < bucket_bytes.size(); ++first) {
    std::int64_t held = 0;
    for (std::size_t j = first; j < std::min(bucket_bytes.size(), first + held_buckets); ++j)
      held += bucket_bytes[j];
    e.backward_extra = std::max(e.backward_extra, held);
  }
  return e;
}

}  // namespace accel::memory
