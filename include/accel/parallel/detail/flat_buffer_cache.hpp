// CPU memory for the flat buffers that come and go at every unit of every step: Zero3's gathered
// parameters (a unit's full buffer, from gather to free_full) and its full gradient (from the
// first gradient to the reduce-scatter). On CUDA the caching allocator keeps such blocks; on CPU
// glibc maps a block above its mmap threshold fresh and unmaps it when freed, so each unit
// faulted its pages in again at every gather, tens of thousands of page faults a step on a
// transformer (docs/how-to/large-models.md, "Zero3's peak on CPU").
//
// The cache keeps a freed block for the next request of exactly its size (the units of a
// transformer are all one size). It never holds more than the buffers' own peak: a request that
// finds no block of its size first frees kept blocks, oldest first, until the kept, the lent and
// the requested bytes together are at most the most ever lent at once (this request included)
// plus one block of the largest size asked for: the buffers' memory stays within one block of
// what mapping each block fresh costs at its peak, and blocks of several sizes taking turns
// (a unit's buffer, its gradient, their narrowed copies) all stay for their next use. release()
// frees what is kept and forgets that peak: after a whole-model gather
// (Accelerator::full_parameters()), whose blocks a step does not need again.
//
// One cache per process (the blocks outlive any strategy: a .grad the user holds returns its
// block when dropped); thread safe (Gloo's threads may drop the last reference).
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "../../detail/separate_compilation.hpp"

namespace accel::parallel::detail {

class FlatBufferCache {
 public:
  ACCEL_DECL static FlatBufferCache& instance();

  // `bytes` of uninitialized CPU memory, a kept block of that size or a fresh one; the block
  // returns to the cache when the last storage using it lets it go.
  ACCEL_DECL at::DataPtr take(std::size_t bytes);
  // Frees every kept block.
  ACCEL_DECL void release();

  struct Counts {
    std::size_t kept_bytes = 0;      // free blocks held for reuse
    std::int64_t fresh_blocks = 0;   // taken from the CPU allocator, since the process started
    std::int64_t reused_blocks = 0;  // taken from the kept ones
  };
  ACCEL_DECL Counts counts() const;

 private:
  struct Block {
    std::size_t bytes;
    at::DataPtr memory;  // owns the allocation
  };
  // The kept blocks' bytes; the caller holds mutex_.
  ACCEL_DECL std::size_t kept_bytes() const;
  // A lent block's deleter (the DataPtr's context is the Block it was lent as).
  ACCEL_DECL static void give_back(void* block);

  mutable std::mutex mutex_;
  std::vector<Block> kept_;  // oldest first
  Counts counts_;            // the blocks taken; kept_bytes is summed from kept_ when asked
  std::size_t lent_bytes_ = 0;       // lent and not yet given back
  std::size_t peak_lent_bytes_ = 0;  // the most lent at once since the last release()
  std::size_t largest_bytes_ = 0;    // the largest block asked for since then
};

// An uninitialized 1-D CPU tensor of `numel` elements whose memory comes from the cache.
ACCEL_DECL torch::Tensor cached_cpu_buffer(std::int64_t numel, const torch::TensorOptions& options);

// Gives the storage under `tensor` (and every view of it) `bytes` of fresh, uninitialized memory,
// or none: how a sharded flat buffer is freed and refilled in place. On CPU the memory comes from
// the cache; elsewhere from the storage's own allocator.
ACCEL_DECL void resize_storage_bytes(const torch::Tensor& tensor, std::size_t bytes);

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/flat_buffer_cache.ipp"
#endif
