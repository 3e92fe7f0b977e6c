// The workers' thread counts; threads.hpp includes it in header-only mode.
#pragma once

#include "../threads.hpp"

namespace accel::launcher {

ACCEL_DECL int usable_cores() {
  cpu_set_t usable;
  CPU_ZERO(&usable);
  if (::sched_getaffinity(0, sizeof usable, &usable) == 0 && CPU_COUNT(&usable) > 0)
    return CPU_COUNT(&usable);
  return std::max(1u, std::thread::hardware_concurrency());
}

ACCEL_DECL std::optional<int> worker_threads(const LaunchOptions& options) {
  const char* set = std::getenv("OMP_NUM_THREADS");
  if ((set != nullptr && *set != '\0') || options.nproc <= 1) return std::nullopt;
  return threads_per_process(usable_cores(), options.nproc);
}

ACCEL_DECL Variables with_worker_threads(Variables variables, const LaunchOptions& options) {
  if (const auto threads = worker_threads(options))
    variables.emplace_back("OMP_NUM_THREADS", std::to_string(*threads));
  return variables;
}

ACCEL_DECL void announce_worker_threads(const LaunchOptions& options) {
  if (const auto threads = worker_threads(options))
    std::fprintf(stderr,
                 "accel-launch: OMP_NUM_THREADS=%d for each of the %d worker processes (%d usable "
                 "cores / %d); set OMP_NUM_THREADS to choose another number\n",
                 *threads, options.nproc, usable_cores(), options.nproc);
}

}  // namespace accel::launcher
