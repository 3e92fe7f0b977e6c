// Which batches of an epoch each rank takes. Rank r takes global batches r, r+W, r+2W, ...;
// with even_batches the last round is completed by wrapping around to the epoch's first
// batches, so every rank iterates the same number of times and no collective waits for a rank
// that ran out of data. With split_batches every rank takes every batch, a 1/W slice of it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tensor_tree.hpp"

namespace accel::data {

struct Shard {
  int rank = 0;
  int world = 1;
  bool even_batches = true;
  bool split_batches = false;

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
    if (split_batches || world == 1 || !even_batches || global == 0) return -1;
    const std::int64_t last_round = count(global) - 1;
    if ((last_round + 1) * world <= global) return -1;
    return std::min(samples, global * batch_size) - last_round * world * batch_size;
  }

  // This rank's rows of a batch under split_batches: contiguous, sizes differ by at most one
  // row-chunk.
  template <class Batch>
  Batch slice(const Batch& batch) const {
    if (!split_batches || world == 1) return batch;
    return map_tensors(batch, [&](const torch::Tensor& t) {
      const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
      const std::int64_t per = (rows + world - 1) / world;
      const std::int64_t start = std::min<std::int64_t>(rank * per, rows);
      return t.dim() == 0 ? t : t.narrow(0, start, std::min(per, rows - start));
    });
  }
};

}  // namespace accel::data
