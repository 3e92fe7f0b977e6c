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

#include "../detail/separate_compilation.hpp"
#include "environment.hpp"
#include "options.hpp"

namespace accel::launcher {

// The CPUs this process may run on (its affinity mask: taskset, cgroups' cpusets, Slurm's
// binding), else the machine's.
ACCEL_DECL int usable_cores();

inline int threads_per_process(int cores, int local_processes) {
  return std::max(1, cores / std::max(1, local_processes));
}

// The OMP_NUM_THREADS the workers get, or nothing when the user set it or there is one worker.
ACCEL_DECL std::optional<int> worker_threads(const LaunchOptions& options);

// `variables` (a worker's, environment.hpp) with OMP_NUM_THREADS added where worker_threads
// says so.
ACCEL_DECL Variables with_worker_threads(Variables variables, const LaunchOptions& options);

// The launcher's one line about it, on stderr, before the workers start.
ACCEL_DECL void announce_worker_threads(const LaunchOptions& options);

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/threads.ipp"
#endif
