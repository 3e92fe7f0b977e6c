// Accelerator::release_memory(objects...), Accelerate's release_memory: between two phases of a
// program (training, then evaluation or export), what the caller no longer needs and what accel
// keeps for reuse goes back, to the allocator and where possible to the system:
//
//   - each object passed is reset to empty: a tensor to an undefined one, a pointer or a module
//     holder to null, anything else to a default-constructed value (an emptied container);
//   - the background save's host snapshot (SaveMode::async), after waiting for the write under
//     way (its failure is thrown, as end_training() throws it); the next async save allocates it
//     again;
//   - the kept blocks of the CPU flat-buffer cache (Zero3's gathered units and full gradients on
//     CPU, parallel/detail/flat_buffer_cache.hpp);
//   - glibc's free heap pages, returned to the kernel (malloc_trim, runtime/cpu_heap.hpp);
//   - on a CUDA libtorch (USE_C10D_NCCL, as state/host_snapshot.hpp), CUDA's caching allocator's
//     unused blocks (emptyCache) and the pinned host blocks its host allocator keeps.
//
// It cannot free what is still referenced: the prepared models' parameters, gradients and
// optimizer state (the Accelerator holds them for as long as it lives), a tensor or module the
// caller keeps another handle to, the process group's buffers (Gloo's, NCCL's and the
// shared-memory transport's, needed by the next collective), memory in use by libtorch itself,
// and whatever glibc cannot trim (a page with a live block on it).
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "../detail/dependent_false.hpp"
#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../error.hpp"
#include "../parallel/detail/flat_buffer_cache.hpp"
#include "../runtime/cpu_heap.hpp"

namespace accel {
namespace memory {

// CUDA's unused cached blocks, device and pinned host, back to the driver; nothing without CUDA.
ACCEL_DECL void empty_device_caches();

// `object` reset to empty (see the top of this file).
template <class Object>
void reset_to_empty(Object& object) {
  if constexpr (std::is_same_v<Object, torch::Tensor>) {
    object = torch::Tensor();
  } else if constexpr (std::is_constructible_v<Object, std::nullptr_t> &&
                       std::is_move_assignable_v<Object>) {
    object = Object(nullptr);  // std::shared_ptr, std::unique_ptr, torch::nn::Linear, ...
  } else if constexpr (std::is_default_constructible_v<Object> &&
                       std::is_move_assignable_v<Object>) {
    object = Object();
  } else {
    static_assert(accel::detail::dependent_false<Object>,
                  "accel: release_memory(objects...) resets each object to empty; pass tensors, "
                  "pointers, module holders or values that are default-constructible and "
                  "assignable, and let the others go out of scope");
  }
}

}  // namespace memory

namespace detail {

/// The Accelerator's release_memory.
template <class Derived>  // the Accelerator, which makes this base a friend
class WithReleaseMemory {
 public:
  /// Frees, between phases, the objects passed and what accel keeps for reuse (see
  /// memory/release_memory.hpp for what and what not). Waits for a background save first, and
  /// throws its failure as end_training() does. Each process frees its own: no collective.
  template <class... Objects>
  void release_memory(Objects&... objects) {
    (memory::reset_to_empty(objects), ...);
    // The up-call is the simplest honest form here: this base is a slice of the Accelerator's
    // public surface and the state it works on lives in the Accelerator; it reads that state
    // (and calls its public members), and nothing it calls comes back into this base.
    auto& runner = static_cast<Derived&>(*this).checkpoints_;
    if (const std::string failure = runner.background.wait(); !failure.empty())
      throw Error(failure);
    runner.background.snapshot().release();
    parallel::detail::FlatBufferCache::instance().release();
    runtime::release_freed_cpu_memory();
    memory::empty_device_caches();
  }

 protected:
  WithReleaseMemory() = default;
};

}  // namespace detail
}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/release_memory.ipp"
#endif
