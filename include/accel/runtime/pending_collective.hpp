// The handle of a collective a group started and the caller waits for later, so that the
// communication overlaps what the caller computes meanwhile: Ddp's bucket all-reduces
// (allreduce_async), Zero2's reduce-scatter of each gradient bucket and Zero3's prefetching
// all-gathers, on the shared-memory path's thread or as c10d's work. One type for every
// transport (transport.hpp): what carries it is the Completion's business. wait() before
// reading the result or freeing the tensors; a failure then names the collective as a blocking
// one's would (through the transport that carried it). Collectives issued after one run after
// it, as always.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"

namespace accel::runtime {

// How a started collective ends (completion.hpp defines it): the shared-memory path's
// future, or c10d's work, and the transport that waits for it. Held through a pointer, so that
// the headers of the training path need not parse <future> in every TU (docs/dev/build-time.md).
struct Completion;

// Where neither transport could start the collective (a fallback of several steps over c10d:
// wire_fallbacks.hpp), it ran here and now: `done` is null and wait() returns at once.
struct PendingCollective {
  // Static text ("allreduce", "allgather", "reduce_scatter"), which the profiling spans keep:
  // the group's layer sets it, the transport the rest.
  const char* operation = "";
  std::uint64_t sequence = 0;
  torch::Tensor input;   // what travels: kept alive until wait(), named by a failure
  torch::Tensor result;  // reduce_scatter_async's chunk; undefined for the others
  // allreduce_async's tensor where its stand-in (`input`) travelled: the sum lands here at wait().
  torch::Tensor land_in;
  std::shared_ptr<Completion> done;
  bool pending() const { return done != nullptr; }
  ACCEL_DECL void wait();
};

}  // namespace accel::runtime

// Its wait() is defined after the group (process_group.hpp), once both transports are: they
// include this header themselves.
