// Handles of collectives a group started and the caller waits for later, so that the
// communication overlaps what the caller computes meanwhile: Ddp's bucket all-reduces
// (PendingAllreduce, on c10d's work or the shared-memory path's thread), Zero2's reduce-scatter
// of each gradient bucket and Zero3's prefetching all-gathers (PendingCollective, on the
// shared-memory path's thread or as c10d's work). wait() before reading the result or freeing the tensors; a
// failure then names the collective as a blocking one's would (through the transport that
// carried it). Collectives issued after one run after it, as always.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <utility>

#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "transport_declarations.hpp"

namespace accel::runtime {

// How a collective started on the shared-memory path's thread ends: shared_memory_path.hpp
// defines it, around a std::shared_future. Held through a pointer, so that the headers of the
// training path need not parse <future> in every TU (docs/dev/build-time.md).
struct Completion;

// A sum all-reduce of a contiguous tensor (ProcessGroup::allreduce_async): after wait(), read
// the tensor (the wire copy travelled where the dtype needed one, and is copied back).
struct PendingAllreduce {
  C10dTransport* c10d = nullptr;
  SharedMemoryPath* path = nullptr;
  std::uint64_t sequence = 0;
  c10::intrusive_ptr<c10d::Work> work;
  torch::Tensor tensor;  // the tensor the result lands in
  torch::Tensor wire;    // its fp32 stand-in on a wire without the dtype, else undefined
  std::shared_ptr<Completion> shared_memory;  // instead of `work` on the shared-memory path
  ACCEL_DECL void wait();
};

// A collective started on the shared-memory path's thread or as c10d's work
// (allgather_into_async, reduce_scatter_async). Where neither could start it (a fallback of
// several steps over c10d: wire_fallbacks.hpp), it ran here and now, and wait() returns at once.
struct PendingCollective {
  SharedMemoryPath* path = nullptr;
  const char* operation = "";
  std::uint64_t sequence = 0;
  torch::Tensor input;
  torch::Tensor result;  // reduce_scatter_async's chunk; undefined for allgather_into_async
  std::shared_ptr<Completion> done;
  bool pending() const { return done != nullptr; }
  ACCEL_DECL void wait();
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/pending_collective.ipp"
#endif
