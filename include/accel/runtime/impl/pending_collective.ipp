// PendingCollective::wait(); pending_collective.hpp includes it in header-only mode.
#pragma once

#include "../../profiling/span.hpp"
#include "../c10d_transport.hpp"
#include "../pending_collective.hpp"
#include "../../runtime/shared_memory_path.hpp"

namespace accel::runtime {

ACCEL_DECL void PendingCollective::wait() {
  if (!done) return;
  const std::shared_ptr<Completion> finished = std::move(done);
  const CollectiveCall call{operation, sequence, input};
  const profiling::Span span(profiling::Phase::communication, operation,
                             static_cast<std::int64_t>(sequence),
                             input.defined() ? static_cast<std::int64_t>(input.nbytes()) : 0,
                             profiling::Part::wait);
  if (finished->c10d) {
    finished->c10d->await(finished->started, call);
  } else {
    try {
      finished->future.get();
    } catch (const std::exception& error) {
      finished->path->failed(call, error);
    }
  }
  if (land_in.defined()) land_in.copy_(input);
}

}  // namespace accel::runtime
