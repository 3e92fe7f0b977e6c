// empty_device_caches; release_memory.hpp includes it in header-only mode.
#pragma once

#include "../release_memory.hpp"

#if defined(USE_C10D_NCCL)
#include <ATen/cuda/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace accel::memory {

ACCEL_DECL void empty_device_caches() {
#if defined(USE_C10D_NCCL)
  if (torch::cuda::is_available()) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    at::cuda::CachingHostAllocator_emptyCache();
  }
#endif
}

}  // namespace accel::memory
