// Which batches of an epoch each rank takes. Rank r takes global batches r, r+W, r+2W, ...;
// with even_batches the last round is completed by wrapping around to the epoch's first
// batches, so every rank iterates the same number of times and no collective waits for a rank
// that ran out of data. With split_batches every rank takes every batch, a 1/W slice of it;
// the batch size must then divide evenly, and (as Accelerate does) a short last batch is
// completed with the epoch's first samples, so that no rank gets an empty or short slice whose
// gradient the average would weigh like a full one. gather_for_metrics drops those again.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../detail/error.hpp"
#include "tensor_tree.hpp"

namespace accel::data {

struct Shard {
  int rank = 0;
  int world = 1;
  bool even_batches = true;
  bool split_batches = false;

  // Refuses what would train wrongly: under split_batches, a batch that does not split into
  // equal slices, or (without even_batches) a short last batch that would.
  void check(std::int64_t batch_size, std::int64_t samples, bool drop_last) const {
    if (!split_batches || world == 1) return;
    if (batch_size % world != 0)
      accel::detail::fail(
          "split_batches: batch_size is {}, which does not split evenly across {} processes; "
          "use a multiple of {} (for example {}), or split_batches = false",
          batch_size, world, world, (batch_size / world + 1) * world);
    if (!even_batches && !drop_last && samples % batch_size != 0)
      accel::detail::fail(
          "split_batches with even_batches = false: the last batch of {} samples holds {}, "
          "which does not split into {} equal slices; keep even_batches = true (the last batch "
          "is completed with the epoch's first samples) or set LoaderOptions::drop_last",
          samples, samples % batch_size, world);
  }

  // Under split_batches, a short last batch is completed to a full one.
  bool pads_last_batch() const { return split_batches && world > 1 && even_batches; }

  // Batches this rank iterates in an epoch of `global` batches.
  std::int64_t count(std::int64_t global) const {
    if (split_batches || world == 1) return global;
    if (even_batches) return (global + world - 1) / world;
    return std::max<std::int64_t>(0, (global - rank + world - 1) / world);
  }

  // The global batch this rank takes at its k-th step.
  std::int64_t global_index(std::int64_t k, std::int64_t global) const {
    if (split_batches || world == 1) return k;
    return (k * world + rank) % global;
  }

  // In the last round, gathered in rank order, the real samples come first and the wrapped
  // duplicates after: how many are real, or -1 when the round holds no duplicate.
  std::int64_t final_round_real_samples(std::int64_t global, std::int64_t samples,
                                        std::int64_t batch_size) const {
    if (world == 1 || !even_batches || global == 0) return -1;
    if (split_batches) {
      const std::int64_t tail = samples - (global - 1) * batch_size;
      return tail < batch_size ? tail : -1;
    }
    const std::int64_t last_round = count(global) - 1;
    if ((last_round + 1) * world <= global) return -1;
    return std::min(samples, global * batch_size) - last_round * world * batch_size;
  }

  // This rank's rows of a batch under split_batches: one of W equal contiguous slices.
  template <class Batch>
  Batch slice(const Batch& batch) const {
    if (!split_batches || world == 1) return batch;
    return map_tensors(batch, [&](const torch::Tensor& t) {
      if (t.dim() == 0) return t;
      const std::int64_t per = t.size(0) / world;
      return t.narrow(0, rank * per, per);
    });
  }
};

}  // namespace accel::data
