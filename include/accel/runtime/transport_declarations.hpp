// The transports, declared for the headers that name them by pointer or reference only
// (process_group.hpp, pending_collective.hpp, registered_allreduce.hpp, collective_check.hpp).
// Their definitions, and c10d's Gloo backend and stores under them, are included by impl/ alone,
// so that a training TU in the separately compiled mode parses none of it (docs/dev/build-time.md;
// static.contracts fails if a header on the training path defines them again).
#pragma once

namespace accel::runtime {

class C10dTransport;     // c10d_transport.hpp
class SharedMemoryPath;  // shared_memory_path.hpp
namespace shm {
class Regions;  // shm/regions.hpp
}  // namespace shm

}  // namespace accel::runtime

namespace accel::testing {
class Fallbacks;  // runtime/fallback_transport.hpp
class Faults;     // runtime/fault_transport.hpp
}  // namespace accel::testing
