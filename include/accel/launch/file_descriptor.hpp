// An owned file descriptor and a close-on-exec pipe, so that no early return leaks one into a
// worker.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <utility>

#include "../detail/separate_compilation.hpp"
#include "error.hpp"

namespace accel::launcher {

class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ACCEL_DECL FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  ACCEL_DECL void reset() noexcept;

 private:
  int fd_ = -1;
};

struct Pipe {
  FileDescriptor read_end;
  FileDescriptor write_end;
};

// Both ends close on exec; a worker gets its end through dup2, which clears the flag.
ACCEL_DECL Pipe make_pipe();

// Only ever on the launcher's own ends: a worker whose stdout were non-blocking would lose
// output (EAGAIN) whenever the pipe is full.
ACCEL_DECL void set_nonblocking(const FileDescriptor& fd);

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/file_descriptor.ipp"
#endif
