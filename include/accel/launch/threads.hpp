// How many threads each worker's torch uses. Left alone, every process of a node sizes its
// intra-op pool (OpenMP) to all the cores, so N processes run N x cores threads and slow each
// other down. As torchrun does, the launcher sets OMP_NUM_THREADS for its workers unless the
// user did, and says so once; here to cores / local processes (torchrun: 1), so that the node's
// cores are shared rather than idle. libtorch reads OMP_NUM_THREADS when it starts, for its
// intra-op threads.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "environment.hpp"
#include "options.hpp"

namespace accel::launcher {

// The CPUs this process may run on (its affinity mask: taskset, cgroups' cpusets, Slurm's
// binding), else the machine's.
inline int usable_cores() {
  cpu_set_t usable;
  CPU_ZERO(&usable);
  if (::sched_getaffinity(0, sizeof usable, &usable) == 0 && CPU_COUNT(&usable) > 0)
    return CPU_COUNT(&usable);
  return std::max(1u, std::thread::hardware_concurrency());
}

inline int threads_per_process(int cores, int local_processes) {
  return std::max(1, cores / std::max(1, local_processes));
}

// The OMP_NUM_THREADS the workers get, or nothing when the user set it or there is one worker.
inline std::optional<int> worker_threads(const LaunchOptions& options) {
  const char* set = std::getenv("OMP_NUM_THREADS");
  if ((set != nullptr && *set != '\0') || options.nproc <= 1) return std::nullopt;
  return threads_per_process(usable_cores(), options.nproc);
}

// `variables` (a worker's, environment.hpp) with OMP_NUM_THREADS added where worker_threads
// says so.
inline Variables with_worker_threads(Variables variables, const LaunchOptions& options) {
  if (const auto threads = worker_threads(options))
    variables.emplace_back("OMP_NUM_THREADS", std::to_string(*threads));
  return variables;
}

// The launcher's one line about it, on stderr, before the workers start.
inline void announce_worker_threads(const LaunchOptions& options) {
  if (const auto threads = worker_threads(options))
    std::fprintf(stderr,
                 "accel-launch: OMP_NUM_THREADS=%d for each of the %d worker processes (%d usable "
                 "cores / %d); set OMP_NUM_THREADS to choose another number\n",
                 *threads, options.nproc, usable_cores(), options.nproc);
}

}  // namespace accel::launcher
