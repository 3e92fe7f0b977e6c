// Collectives between the ranks of one node through a shared segment: all-reduce, reduce-scatter,
// all-gather and broadcast of raw CPU buffers at memory bandwidth, where Gloo over loopback moves
// every byte through the kernel's TCP stack.
//
// Layout: a header (one control block per rank, barrier.hpp), then two buffer sets, each with a
// slot per rank and a result slot of `slot_bytes`. A collective moves its data in pieces that fit
// a slot, alternating between the two sets so that the ranks need one barrier per piece (two for
// an all-reduce) and a fast rank can fill the next piece while a slow one reads the last.
//   all-reduce:     each rank copies its piece into its slot; rank r reduces slice r of the piece
//                   over every slot (in rank order) into the result slot; every rank copies the
//                   whole result out. No rank touches more than its 1/N share of the reduction.
//   reduce-scatter: each rank copies the same part of every chunk into its slot; rank r reduces
//                   part r over every slot straight into its output.
//   all-gather:     each rank copies its piece into its slot; every rank copies every slot out.
//   broadcast:      the root copies into its slot; the others copy it out.
//   barrier:        no data: the call record's meeting and one more.
//   all-reduce of regions (regions.hpp): the data already lies in shared memory, one region per
//                   rank; rank r sums slice r over every region and writes it into every region.
//                   No slot, no copy in or out: one barrier before, one after.
// Every collective first publishes what it is (sequence number, operation, dtype, count, root);
// at its first barrier each rank compares the others' against its own, so a rank that called a
// different collective fails every rank at once instead of corrupting or hanging. That barrier
// also keeps a collective from filling a slot a slower rank still reads from the last one; a
// collective without data meets once more, so its record stays readable until all compared.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "../../detail/error.hpp"
#include "../../detail/separate_compilation.hpp"
#include "barrier.hpp"
#include "elements.hpp"
#include "segment.hpp"

namespace accel::runtime::shm {

enum class Operation : std::uint8_t {
  setup, allreduce, reduce_scatter, allgather, broadcast, map_regions, allreduce_regions, barrier
};

ACCEL_DECL std::string_view to_string(Operation op);

class Transport {
 public:
  // What 2 buffer sets of `size` + 1 slots take after the header.
  static std::size_t segment_bytes(int size, std::size_t slot_bytes) {
    return header_bytes(size) + 2 * (static_cast<std::size_t>(size) + 1) * slot_bytes;
  }

  // Collective: every rank of the node, with the same segment (made with segment_bytes(size,
  // slot_bytes)). Returns once every rank has mapped it; rank 0 has then unlinked its name.
  ACCEL_DECL Transport(Segment segment, int rank, int size, std::size_t slot_bytes,
                       std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::size_t slot_bytes() const { return slot_bytes_; }

  // In place: `count` elements of `type` at `data`.
  ACCEL_DECL void allreduce(void* data, std::size_t count, DataType type, Reduction op);

  // `input` holds size() chunks of `chunk` elements; `output` gets this rank's chunk reduced.
  // `output` may be this rank's chunk of `input`: each piece is copied out before it is written.
  ACCEL_DECL void reduce_scatter(const void* input, void* output, std::size_t chunk, DataType type,
                                 Reduction op);

  // `output` gets every rank's `bytes` bytes of `input`, in rank order. `input` may be this
  // rank's part of `output`.
  ACCEL_DECL void allgather(const void* input, void* output, std::size_t bytes);

  // Rank root's `bytes` bytes at `data` on every rank.
  ACCEL_DECL void broadcast(void* data, std::size_t bytes, int root);

  // Every rank has reached this point. A call record like the others', so that a rank in another
  // collective fails every rank at once (ProcessGroup::barrier takes this path when shared
  // memory carries the group: a barrier through Gloo would never meet a peer waiting here).
  ACCEL_DECL void barrier();

  // This rank leaves the group (ProcessGroup's teardown): peers waiting for it at a barrier it
  // never reaches fail at once, naming it, rather than when its process is gone.
  void leave() { barrier_.leave(); }

  // Every rank has mapped a Regions of `bytes` per rank (regions.hpp), and all asked for the
  // same size: after this, rank 0 may unlink its name.
  ACCEL_DECL void regions_mapped(std::size_t bytes);

  // In place in shared memory: the `count` elements of `type` at byte `offset` of every rank's
  // region (`regions`: each rank's region at this process's addresses, in rank order), summed
  // in rank order, times `scale`, land in every rank's region. A rank's region must not change
  // from the call until it returns (the sum is written into it).
  ACCEL_DECL void allreduce_regions(std::byte* const* regions, std::size_t offset,
                                    std::size_t count, DataType type, double scale);

 private:
  // The call record each rank publishes: sequence, operation, dtype, count, argument.
  using Call = std::array<std::uint64_t, 5>;

  ACCEL_DECL static std::size_t header_bytes(int size);
  RankControl* controls() const {
    return reinterpret_cast<RankControl*>(segment_.data() + sizeof(WakeWords));
  }
  ACCEL_DECL std::byte* slot(int set, int r) const;
  std::byte* result(int set) const { return slot(set, size_); }

  // Rank r's share [lo, hi) of n elements.
  ACCEL_DECL std::pair<std::size_t, std::size_t> share(std::size_t n, int r) const;

  // Publishes the call, meets the others and compares what each rank called.
  ACCEL_DECL void start(Operation op, DataType type, std::uint64_t count, std::uint64_t argument);
  ACCEL_DECL void meet(Operation op);

  ACCEL_DECL static std::string describe(const Call& call);

  Segment segment_;
  int rank_;
  int size_;
  std::size_t slot_bytes_;
  Barrier barrier_;
  std::uint64_t sequence_ = 0;
  Call current_{};
  bool broken_ = false;
};

}  // namespace accel::runtime::shm

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/transport.ipp"
#endif
