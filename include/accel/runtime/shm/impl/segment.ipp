// Segment; segment.hpp includes it in header-only mode.
#pragma once

#include "../segment.hpp"

namespace accel::runtime::shm {

ACCEL_DECL Segment Segment::create(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
  if (fd < 0)
    accel::detail::fail("cannot create the shared-memory segment {} ({}); a segment of that name "
                        "exists or /dev/shm is not writable; set ACCEL_SHARED_MEMORY=0 to use Gloo "
                        "over loopback instead",
                        name, std::strerror(errno));
  return sized(name, fd, bytes);
}

ACCEL_DECL Segment Segment::create_fresh(std::string_view run_token, std::string_view group,
                                         std::size_t bytes) {
  constexpr int attempts = 8;
  std::string name;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    name = fresh_segment_name(run_token, group);
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
    if (fd >= 0) return sized(name, fd, bytes);
    if (errno != EEXIST)
      accel::detail::fail("cannot create the shared-memory segment {} ({}); /dev/shm may not be "
                          "writable; set ACCEL_SHARED_MEMORY=0 to use Gloo over loopback instead",
                          name, std::strerror(errno));
  }
  accel::detail::fail("cannot create a shared-memory segment: {} random names in a row (the last "
                      "{}) existed already, which only a process making such names in /dev/shm on "
                      "purpose explains; find it (ls -l /dev/shm), or set ACCEL_SHARED_MEMORY=0 to "
                      "use Gloo over loopback instead",
                      attempts, name);
}

ACCEL_DECL Segment Segment::open(const std::string& name, std::size_t bytes,
                                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto pause = std::chrono::microseconds(50);; pause = std::min(pause * 2, max_pause)) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    if (fd >= 0) {
      struct stat status {};
      const bool known = ::fstat(fd, &status) == 0;
      if (known && status.st_uid != ::geteuid()) {
        ::close(fd);
        accel::detail::fail("the shared-memory segment {} belongs to another user (uid {}), so it "
                            "is not this run's; set ACCEL_SHARED_MEMORY=0 to use Gloo over "
                            "loopback instead",
                            name, status.st_uid);
      }
      if (known && static_cast<std::size_t>(status.st_size) == bytes)
        return Segment(name, fd, bytes, /*owner=*/false);
      ::close(fd);
    } else if (errno != ENOENT) {
      accel::detail::fail("cannot open the shared-memory segment {} ({}); set "
                          "ACCEL_SHARED_MEMORY=0 to use Gloo over loopback instead",
                          name, std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() > deadline)
      accel::detail::fail("rank 0 did not create the shared-memory segment {} of {} bytes within "
                          "the rendezvous timeout; is every rank of this node in the same run?",
                          name, bytes);
    std::this_thread::sleep_for(pause);
  }
}

ACCEL_DECL Segment::Segment(Segment&& other) noexcept
    : name_(std::move(other.name_)), base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)), owner_(std::exchange(other.owner_, false)),
      named_(std::exchange(other.named_, false)) {}

ACCEL_DECL Segment& Segment::operator=(Segment other) noexcept {
  std::swap(name_, other.name_);
  std::swap(base_, other.base_);
  std::swap(bytes_, other.bytes_);
  std::swap(owner_, other.owner_);
  std::swap(named_, other.named_);
  return *this;
}

ACCEL_DECL Segment::~Segment() {
  unlink();
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

ACCEL_DECL void Segment::unlink() {
  if (owner_ && named_) ::shm_unlink(name_.c_str());
  named_ = false;
}

ACCEL_DECL Segment Segment::sized(const std::string& name, int fd, std::size_t bytes) {
  // Allocated now, not as pages are first touched: a /dev/shm too small for the segment fails
  // here with a message, where a sparse one would end the process with SIGBUS mid-collective.
  if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); error != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    accel::detail::fail("cannot size the shared-memory segment {} to {} bytes ({}); /dev/shm may "
                        "be too small (df -h /dev/shm); set ACCEL_SHARED_MEMORY=0 to use Gloo "
                        "instead",
                        name, bytes, std::strerror(error));
  }
  return Segment(name, fd, bytes, /*owner=*/true);
}

ACCEL_DECL Segment::Segment(std::string name, int fd, std::size_t bytes, bool owner)
    : name_(std::move(name)), bytes_(bytes), owner_(owner), named_(owner) {
  base_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping keeps the memory
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    unlink();
    accel::detail::fail("cannot map the shared-memory segment {} of {} bytes ({})", name_, bytes,
                        std::strerror(error));
  }
}

}  // namespace accel::runtime::shm
