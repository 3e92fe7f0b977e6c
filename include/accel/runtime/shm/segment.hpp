// A POSIX shared-memory segment that the ranks of one node map. Rank 0 creates it under a name
// with a random part that nobody can guess (owner-only permissions, O_EXCL: never someone else's
// segment, and a name taken first is passed over for another); the others
// open it once it holds its full size; and as soon as every rank has mapped it, rank 0 unlinks
// the name, so nothing is left in /dev/shm however the processes end after that. The window
// before (a rank killed during set-up) is covered by the launcher, which removes the run's
// names when the group ends (segment_name.hpp).
//
// No torch here: the shared-memory transport works on raw bytes.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "../../detail/error.hpp"
#include "../../detail/separate_compilation.hpp"
#include "segment_name.hpp"

namespace accel::runtime::shm {

class Segment {
 public:
  Segment() = default;
  // Rank 0: a new segment of `bytes`, zero-filled. Fails if the name exists (a stale segment of
  // a crashed run with the same token would be someone else's state).
  ACCEL_DECL static Segment create(const std::string& name, std::size_t bytes);

  // Rank 0 of a group that passes the name on through its store: a new segment under a fresh,
  // random name (fresh_segment_name). A name that exists all the same was made by someone else
  // first, who must not be able to stop the run: it is passed over for another.
  ACCEL_DECL static Segment create_fresh(std::string_view run_token, std::string_view group,
                                         std::size_t bytes);

  // The other ranks: waits (up to `timeout`) for rank 0 to create and size the segment. One
  // that another user owns is not rank 0's (whose segments only their owner can open): refused.
  ACCEL_DECL static Segment open(const std::string& name, std::size_t bytes,
                                 std::chrono::milliseconds timeout);

  ACCEL_DECL Segment(Segment&& other) noexcept;
  ACCEL_DECL Segment& operator=(Segment other) noexcept;
  Segment(const Segment&) = delete;
  ACCEL_DECL ~Segment();

  // Rank 0, once every rank has mapped the segment: the name goes, the mappings stay.
  ACCEL_DECL void unlink();

  std::byte* data() const { return static_cast<std::byte*>(base_); }
  std::size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  static constexpr std::chrono::microseconds max_pause{5000};

  // A segment just created as `fd`: sized to `bytes` (zero-filled) and mapped.
  ACCEL_DECL static Segment sized(const std::string& name, int fd, std::size_t bytes);

  ACCEL_DECL Segment(std::string name, int fd, std::size_t bytes, bool owner);

  std::string name_;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  bool owner_ = false;
  bool named_ = false;
};

}  // namespace accel::runtime::shm

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/segment.ipp"
#endif
