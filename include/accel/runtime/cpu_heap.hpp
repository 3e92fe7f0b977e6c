// glibc's heap, tuned for training on CPU: freed tensor memory stays in the process.
//
// glibc returns a freed block above its mmap threshold to the kernel (and trims the top of the
// heap above its trim threshold); both thresholds adapt to the allocation history. A training
// step frees and allocates the same activation and gradient sizes every step, so with the
// defaults each step can fault its memory in again: on the development machine the xfmr
// benchmark model took 468 page faults per step and ran at 61% of the speed it reaches with the
// memory kept (docs/benchmarks.md). Raising both thresholds keeps that memory for reuse; the
// peak resident size is unchanged there, since the peak is the live memory of one step.
#pragma once

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace accel::runtime {

// Blocks below 32 MiB come from the heap, and up to 1 GiB of free heap top is kept. Leaves
// glibc alone when the user set either threshold in the environment (their choice wins) and on
// C libraries other than glibc. Returns whether it changed anything.
inline bool keep_freed_cpu_memory() {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr)
    return false;
  // The mmap threshold first: setting it fixes it (no more adapting), and the trim threshold
  // must not be left at its default below it.
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
#else
  return false;
#endif
}

}  // namespace accel::runtime
