// How a started collective ends, held by pointer by the pending collective
// (pending_collective.hpp): queued on the shared-memory path's thread, its future and the path
// that names its failure (shared_memory_path.hpp); started as c10d's work (C10dTransport's
// start_allreduce and the others), the work and the transport that awaits it, and what finishes
// it once it landed (C10dStarted::then). Its own header, so that each transport sees it without
// the other's.
#pragma once

#include <future>

#include "c10d_started.hpp"
#include "transport_declarations.hpp"

namespace accel::runtime {

struct Completion {
  std::shared_future<void> future;
  SharedMemoryPath* path = nullptr;  // names a failure of `future`
  C10dTransport* c10d = nullptr;     // set where c10d carries it instead: `started`
  C10dStarted started;
};

}  // namespace accel::runtime
