// An owned file descriptor and a close-on-exec pipe, so that no early return leaks one into a
// worker.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <utility>

#include "error.hpp"

namespace accel::launcher {

class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  FileDescriptor read_end;
  FileDescriptor write_end;
};

// Both ends close on exec; a worker gets its end through dup2, which clears the flag.
inline Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail_with_errno("cannot create a pipe");
  return {FileDescriptor(fds[0]), FileDescriptor(fds[1])};
}

// Only ever on the launcher's own ends: a worker whose stdout were non-blocking would lose
// output (EAGAIN) whenever the pipe is full.
inline void set_nonblocking(const FileDescriptor& fd) {
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0)
    fail_with_errno("cannot make a pipe non-blocking");
}

}  // namespace accel::launcher
