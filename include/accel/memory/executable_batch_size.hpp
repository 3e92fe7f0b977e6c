// accel::find_executable_batch_size(start, fn[, group]): Accelerate's decorator of that name.
// Calls fn(batch_size) from `start`; when it runs out of memory (CUDA's out-of-memory error,
// c10::OutOfMemoryError, the CPU allocator's "can't allocate memory", std::bad_alloc) the
// batch size is halved and fn called again, until it returns. Any other error passes through at
// once. fn must start from scratch on each call (build its loader from the size it is given; the
// memory of a failed try is freed when its tensors go out of scope, which is why the work lives
// inside fn).
//
// Across processes (the accelerator as the last argument) the ranks agree after every try: if
// any rank ran out of memory, every rank halves and tries again, so all run the smallest size
// any rank could run, and a rank never trains with another batch size than its peers. Each try
// must then reach that agreement on every rank: an out-of-memory error should come before fn's
// first collective (the first forward and backward, as it usually does), or the other ranks wait
// in that collective until Options::timeout.
//
// Returns what fn returns; for a fn returning nothing, the batch size that ran.
#pragma once

#include <malloc.h>
#include <torch/torch.h>

#include <concepts>
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "../detail/error.hpp"
#include "../runtime/any_rank.hpp"
#include "../runtime/process_group.hpp"

namespace accel::memory {

namespace detail {

// Whether the error in flight says that memory ran out; its message in `what`.
inline bool out_of_memory(std::exception_ptr error, std::string& what) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::OutOfMemoryError& e) {
    what = e.what_without_backtrace();
    return true;
  } catch (const c10::Error& e) {
    what = e.what_without_backtrace();
    return what.find("can't allocate memory") != std::string::npos ||
           what.find("out of memory") != std::string::npos;
  } catch (const std::bad_alloc& e) {
    what = e.what();
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace detail

template <class Fn>
auto find_executable_batch_size(std::int64_t start, Fn&& fn, runtime::ProcessGroup* group = nullptr) {
  using Result = std::invoke_result_t<Fn&, std::int64_t>;
  if (start < 1)
    accel::detail::fail("find_executable_batch_size: the starting batch size is {}; it must be at "
                        "least 1",
                        start);
  for (std::int64_t size = start;; size /= 2) {
    std::optional<std::conditional_t<std::is_void_v<Result>, std::int64_t, Result>> result;
    bool failed = false;
    std::string what;
    try {
      if constexpr (std::is_void_v<Result>) {
        fn(size);
        result = size;
      } else {
        result.emplace(fn(size));
      }
    } catch (...) {
      if (!detail::out_of_memory(std::current_exception(), what)) throw;
      failed = true;
    }
    // What the failed try left freed goes back to the system, so the next try finds it.
#if defined(__GLIBC__)
    if (failed) ::malloc_trim(0);
#endif
    if (!runtime::any_rank(group, failed)) return std::move(*result);
    if (size == 1)
      accel::detail::fail(
          "find_executable_batch_size: batch size 1 still runs out of memory{} ({}); make the "
          "model's footprint smaller (Zero3 shards parameters, Options::activation_checkpointing "
          "drops activations, Bf16 halves them; accel::estimate_memory tells which part is "
          "large)",
          failed ? "" : " on another rank", failed ? what : "see that rank's output");
  }
}

/// The same across the ranks of `accelerator` (an accel::Accelerator): every rank calls it, and
/// all of them agree after every try. The group comes from the Accelerator's collectives
/// (core/collective_calls.hpp), found by argument-dependent lookup.
template <class Fn, class Accelerator>
  requires requires(const Accelerator& accelerator) {
    { collective_group(accelerator) } -> std::same_as<runtime::ProcessGroup*>;
  }
auto find_executable_batch_size(std::int64_t start, Fn&& fn, const Accelerator& accelerator) {
  return find_executable_batch_size(start, std::forward<Fn>(fn), collective_group(accelerator));
}

}  // namespace accel::memory

namespace accel {
using memory::find_executable_batch_size;
}  // namespace accel
