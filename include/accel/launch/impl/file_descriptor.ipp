// FileDescriptor and the pipe helpers; file_descriptor.hpp includes it in header-only mode.
#pragma once

#include "../file_descriptor.hpp"

namespace accel::launcher {

ACCEL_DECL FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ACCEL_DECL void FileDescriptor::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ACCEL_DECL Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail_with_errno("cannot create a pipe");
  return {FileDescriptor(fds[0]), FileDescriptor(fds[1])};
}

ACCEL_DECL void set_nonblocking(const FileDescriptor& fd) {
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0)
    fail_with_errno("cannot make a pipe non-blocking");
}

}  // namespace accel::launcher
