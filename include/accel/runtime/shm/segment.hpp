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
#include "segment_name.hpp"

namespace accel::runtime::shm {

class Segment {
 public:
  Segment() = default;
  // Rank 0: a new segment of `bytes`, zero-filled. Fails if the name exists (a stale segment of
  // a crashed run with the same token would be someone else's state).
  static Segment create(const std::string& name, std::size_t bytes) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
    if (fd < 0)
      detail::fail("cannot create the shared-memory segment {} ({}); a segment of that name "
                   "exists or /dev/shm is not writable; set ACCEL_SHARED_MEMORY=0 to use Gloo "
                   "over loopback instead",
                   name, std::strerror(errno));
    return sized(name, fd, bytes);
  }

  // Rank 0 of a group that passes the name on through its store: a new segment under a fresh,
  // random name (fresh_segment_name). A name that exists all the same was made by someone else
  // first, who must not be able to stop the run: it is passed over for another.
  static Segment create_fresh(std::string_view run_token, std::string_view group,
                              std::size_t bytes) {
    constexpr int attempts = 8;
    std::string name;
    for (int attempt = 0; attempt < attempts; ++attempt) {
      name = fresh_segment_name(run_token, group);
      const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
      if (fd >= 0) return sized(name, fd, bytes);
      if (errno != EEXIST)
        detail::fail("cannot create the shared-memory segment {} ({}); /dev/shm may not be "
                     "writable; set ACCEL_SHARED_MEMORY=0 to use Gloo over loopback instead",
                     name, std::strerror(errno));
    }
    detail::fail("cannot create a shared-memory segment: {} random names in a row (the last {}) "
                 "existed already, which only a process making such names in /dev/shm on purpose "
                 "explains; find it (ls -l /dev/shm), or set ACCEL_SHARED_MEMORY=0 to use Gloo "
                 "over loopback instead",
                 attempts, name);
  }

  // The other ranks: waits (up to `timeout`) for rank 0 to create and size the segment. One
  // that another user owns is not rank 0's (whose segments only their owner can open): refused.
  static Segment open(const std::string& name, std::size_t bytes,
                      std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto pause = std::chrono::microseconds(50);; pause = std::min(pause * 2, max_pause)) {
      const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
      if (fd >= 0) {
        struct stat status {};
        const bool known = ::fstat(fd, &status) == 0;
        if (known && status.st_uid != ::geteuid()) {
          ::close(fd);
          detail::fail("the shared-memory segment {} belongs to another user (uid {}), so it is "
                       "not this run's; set ACCEL_SHARED_MEMORY=0 to use Gloo over loopback "
                       "instead",
                       name, status.st_uid);
        }
        if (known && static_cast<std::size_t>(status.st_size) == bytes)
          return Segment(name, fd, bytes, /*owner=*/false);
        ::close(fd);
      } else if (errno != ENOENT) {
        detail::fail("cannot open the shared-memory segment {} ({}); set ACCEL_SHARED_MEMORY=0 "
                     "to use Gloo over loopback instead",
                     name, std::strerror(errno));
      }
      if (std::chrono::steady_clock::now() > deadline)
        detail::fail("rank 0 did not create the shared-memory segment {} of {} bytes within the "
                     "rendezvous timeout; is every rank of this node in the same run?",
                     name, bytes);
      std::this_thread::sleep_for(pause);
    }
  }

  Segment(Segment&& other) noexcept
      : name_(std::move(other.name_)), base_(std::exchange(other.base_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)), owner_(std::exchange(other.owner_, false)),
        named_(std::exchange(other.named_, false)) {}
  Segment& operator=(Segment other) noexcept {
    std::swap(name_, other.name_);
    std::swap(base_, other.base_);
    std::swap(bytes_, other.bytes_);
    std::swap(owner_, other.owner_);
    std::swap(named_, other.named_);
    return *this;
  }
  Segment(const Segment&) = delete;
  ~Segment() {
    unlink();
    if (base_ != nullptr) ::munmap(base_, bytes_);
  }

  // Rank 0, once every rank has mapped the segment: the name goes, the mappings stay.
  void unlink() {
    if (owner_ && named_) ::shm_unlink(name_.c_str());
    named_ = false;
  }

  std::byte* data() const { return static_cast<std::byte*>(base_); }
  std::size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  static constexpr std::chrono::microseconds max_pause{5000};

  // A segment just created as `fd`: sized to `bytes` (zero-filled) and mapped.
  static Segment sized(const std::string& name, int fd, std::size_t bytes) {
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int error = errno;
      ::close(fd);
      ::shm_unlink(name.c_str());
      detail::fail("cannot size the shared-memory segment {} to {} bytes ({}); /dev/shm may be "
                   "too small (df -h /dev/shm); set ACCEL_SHARED_MEMORY=0 to use Gloo instead",
                   name, bytes, std::strerror(error));
    }
    return Segment(name, fd, bytes, /*owner=*/true);
  }

  Segment(std::string name, int fd, std::size_t bytes, bool owner)
      : name_(std::move(name)), bytes_(bytes), owner_(owner), named_(owner) {
    base_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);  // the mapping keeps the memory
    if (base_ == MAP_FAILED) {
      base_ = nullptr;
      unlink();
      detail::fail("cannot map the shared-memory segment {} of {} bytes ({})", name_, bytes,
                   std::strerror(error));
    }
  }

  std::string name_;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  bool owner_ = false;
  bool named_ = false;
};

}  // namespace accel::runtime::shm
