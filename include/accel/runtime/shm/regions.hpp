// Memory that every rank of a node maps, one region per rank: Ddp's gradient buckets live there
// (parallel/detail/reducer.hpp), so that the transport all-reduces them where they lie
// (Transport::allreduce_regions) instead of copying them through its slots and back. A rank
// writes its own region (backward's gradients) and, during an all-reduce, its share of the sum
// into every rank's region; the transport's barriers order the two.
//
// Each region starts on a page of its own, so that its first writer, its own rank, places it.
// No torch here, as in the rest of shm/.
#pragma once

#include <cstddef>
#include <vector>

#include "../../detail/separate_compilation.hpp"
#include "segment.hpp"

namespace accel::runtime::shm {

class Regions {
 public:
  // The segment's size for `size` regions of `bytes`.
  static std::size_t segment_bytes(int size, std::size_t bytes) {
    return static_cast<std::size_t>(size) * stride(bytes);
  }

  // `segment`, made with segment_bytes(size, bytes), as rank `rank` maps it.
  ACCEL_DECL Regions(Segment segment, int rank, int size, std::size_t bytes);

  // Rank 0, once every rank has mapped the segment (the mappings stay).
  void unlink() { segment_.unlink(); }

  // Every rank's region, in rank order, at this process's addresses.
  std::byte* const* bases() const { return bases_.data(); }
  std::byte* mine() const { return bases_[static_cast<std::size_t>(rank_)]; }
  std::size_t bytes() const { return bytes_; }

 private:
  static std::size_t stride(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

  Segment segment_;
  int rank_;
  std::size_t bytes_;
  std::vector<std::byte*> bases_;
};

}  // namespace accel::runtime::shm

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/regions.ipp"
#endif
