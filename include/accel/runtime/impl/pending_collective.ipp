// The pending collectives' wait(); pending_collective.hpp includes it in header-only mode.
#pragma once

#include "../../profiling/span.hpp"
#include "../c10d_transport.hpp"
#include "../pending_collective.hpp"
#include "../../runtime/shared_memory_path.hpp"

namespace accel::runtime {

ACCEL_DECL void PendingAllreduce::wait() {
  const CollectiveCall call{"allreduce", sequence, wire.defined() ? wire : tensor};
  const profiling::Span span(profiling::Phase::communication, "allreduce",
                             static_cast<std::int64_t>(sequence),
                             static_cast<std::int64_t>(call.tensor.nbytes()), profiling::Part::wait);
  if (shared_memory) {
    try {
      shared_memory->future.get();
    } catch (const std::exception& error) {
      path->failed(call, error);
    }
  } else {
    c10d->await(work, call);
  }
  if (wire.defined()) tensor.copy_(wire);
}

ACCEL_DECL void PendingCollective::wait() {
  if (!done) return;
  const std::shared_ptr<Completion> finished = std::move(done);
  const profiling::Span span(profiling::Phase::communication, operation,
                             static_cast<std::int64_t>(sequence),
                             input.defined() ? static_cast<std::int64_t>(input.nbytes()) : 0,
                             profiling::Part::wait);
  if (finished->c10d) {
    finished->c10d->await(finished->started, CollectiveCall{operation, sequence, input});
    return;
  }
  try {
    finished->future.get();
  } catch (const std::exception& error) {
    path->failed(CollectiveCall{operation, sequence, input}, error);
  }
}

}  // namespace accel::runtime
