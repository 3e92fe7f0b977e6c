// glibc's heap, tuned for training on CPU: freed tensor memory stays in the process.
//
// glibc returns a freed block above its mmap threshold to the kernel (and trims the top of the
// heap above its trim threshold); both thresholds adapt to the allocation history. A training
// step frees and allocates the same activation and gradient sizes every step, so with the
// defaults each step can fault its memory in again, which on CPU can cost a large part of the
// step (docs/concepts/performance.md, "The CPU heap: accel's default and glibc's"). Raising both thresholds
// keeps that memory for reuse; the peak resident size does not grow, since the peak is the live
// memory of one step.
#pragma once

#include <cstddef>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>

#include "../detail/separate_compilation.hpp"
#endif

namespace accel::runtime {

// Blocks below mmap_threshold (Options::cpu_heap_mmap_threshold, 32 MiB by default) come from
// the heap, and up to 1 GiB of free heap top is kept. Leaves glibc alone when the user set either
// threshold in the environment (their choice wins) and on C libraries other than glibc. Returns
// whether it changed anything.
ACCEL_DECL bool keep_freed_cpu_memory(std::size_t mmap_threshold = std::size_t{32} << 20);

// Gives the heap's free memory back to the kernel, once, after prepare(): flattening a model for
// a sharded strategy copies its parameters into flat buffers and frees the originals, which the
// thresholds above would otherwise keep resident for the whole run (under Zero3 on 2 ranks, the
// full model's size on top of the shards: the peak was above Ddp's). What a step frees is kept
// as before.
inline void release_freed_cpu_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/cpu_heap.ipp"
#endif
