// The glibc heap settings; cpu_heap.hpp includes it in header-only mode.
#pragma once

#include "../cpu_heap.hpp"

namespace accel::runtime {

ACCEL_DECL bool keep_freed_cpu_memory(std::size_t mmap_threshold) {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr)
    return false;
  // The mmap threshold first: setting it fixes it (no more adapting), and the trim threshold
  // must not be left at its default below it.
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
#else
  (void)mmap_threshold;
  return false;
#endif
}

}  // namespace accel::runtime
