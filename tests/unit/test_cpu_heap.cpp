// runtime/cpu_heap.hpp: glibc keeps freed blocks below 32 MiB in the heap once tuned, and the
// user's own malloc variables win.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include <cstdlib>

#include "helpers.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_cpu_heap {

#if defined(__GLIBC__)

namespace {
// Whether glibc served a block of this size with its own mmap (counted in hblks).
bool mmapped(std::size_t bytes) {
  const auto before = mallinfo2().hblks;
  void* block = std::malloc(bytes);
  REQUIRE(block != nullptr);
  const auto during = mallinfo2().hblks;
  std::free(block);
  return during > before;
}
}  // namespace

TEST_CASE("keep_freed_cpu_memory: blocks below 32 MiB come from the heap") {
  {
    accel_test::ScopedEnv user("MALLOC_TRIM_THRESHOLD_", "1000000");
    CHECK_FALSE(accel::runtime::keep_freed_cpu_memory());  // the user's variable wins
  }
  accel_test::ScopedEnv unset("MALLOC_TRIM_THRESHOLD_", nullptr);

  CHECK(accel::runtime::keep_freed_cpu_memory());
  CHECK_FALSE(mmapped(16u << 20));
  CHECK(mmapped(64u << 20));  // above the threshold: still its own mapping
}
#endif

}  // namespace unit_cpu_heap
