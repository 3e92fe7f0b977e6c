// The POSIX file helpers; posix_file.hpp includes it in header-only mode.
#pragma once

#include "../posix_file.hpp"

namespace accel::state::posix {

ACCEL_DECL void fail_errno(std::string_view what, const std::filesystem::path& path) {
  const int code = errno;
  accel::detail::fail("cannot {} '{}': {}", what, path.string(), std::strerror(code));
}

ACCEL_DECL const char* kind_of_file(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISREG(mode)) return "a regular file";
  return "a special file";
}

// O_NONBLOCK: opening a FIFO waits for its other end, forever when there is none; with it,
// open() returns at once (or fails with ENXIO, for writing), and the file's kind is refused
// below before anything is read or written. Then the descriptor blocks again, as reads of a
// regular file do anyway.
ACCEL_DECL Descriptor::Descriptor(const std::filesystem::path& path, int flags, mode_t mode)
    : path_(path), fd_(::open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK, mode)) {
  const bool folder = (flags & O_DIRECTORY) != 0;
  struct stat info {};
  if (fd_ < 0) {
    // A FIFO opened for writing without a reader fails (ENXIO): it is named as what it is.
    const int code = errno;
    if (folder || ::stat(path.c_str(), &info) != 0 || S_ISREG(info.st_mode)) {
      errno = code;
      fail_errno("open", path);
    }
  } else if (::fstat(fd_, &info) != 0) {
    const int code = errno;
    ::close(fd_);
    fd_ = -1;
    errno = code;
    fail_errno("stat", path);
  }
  if (folder ? !S_ISDIR(info.st_mode) : !S_ISREG(info.st_mode)) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    accel::detail::fail("'{}' is not a {} but {}; accel reads and writes weights and "
                        "checkpoints as regular files only: put the file itself there",
                        path_.string(), folder ? "folder" : "regular file",
                        kind_of_file(info.st_mode));
  }
  const int status = ::fcntl(fd_, F_GETFL);
  if (status < 0 || ::fcntl(fd_, F_SETFL, status & ~O_NONBLOCK) != 0) {
    const int code = errno;
    ::close(fd_);
    fd_ = -1;
    errno = code;
    fail_errno("use", path);
  }
}

ACCEL_DECL Descriptor::~Descriptor() {
  if (fd_ >= 0) ::close(fd_);
}

ACCEL_DECL void Descriptor::write_all(const void* data, std::size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, at, std::min<std::size_t>(size, std::size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno("write", path_);
    at += n;
    size -= static_cast<std::size_t>(n);
  }
}

ACCEL_DECL void Descriptor::sync() {
  if (::fsync(fd_) != 0) fail_errno("fsync", path_);
}

ACCEL_DECL void Descriptor::close() {
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_errno("close", path_);
}

ACCEL_DECL std::size_t Descriptor::size() const {
  struct stat info {};
  if (::fstat(fd_, &info) != 0) fail_errno("stat", path_);
  return static_cast<std::size_t>(info.st_size);
}

ACCEL_DECL void Descriptor::read_at(void* data, std::size_t size, std::uint64_t offset) {
  char* at = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd_, at + done, std::min<std::size_t>(size - done, std::size_t{1} << 30),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno("read", path_);
    if (n == 0)
      accel::detail::fail("'{}' ended after {} bytes, {} expected from byte {}", path_.string(),
                          offset + done, size, offset);
    done += static_cast<std::size_t>(n);
  }
}

ACCEL_DECL void Descriptor::read_exactly(void* data, std::size_t size) {
  char* at = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd_, at + done, std::min<std::size_t>(size - done, std::size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno("read", path_);
    if (n == 0)
      accel::detail::fail("'{}' ended after {} bytes, {} expected", path_.string(), done, size);
    done += static_cast<std::size_t>(n);
  }
}

ACCEL_DECL std::string read_file(const std::filesystem::path& path) {
  Descriptor file(path, O_RDONLY);
  std::string bytes(file.size(), '\0');
  file.read_exactly(bytes.data(), bytes.size());
  return bytes;
}

ACCEL_DECL void write_file_synced(const std::filesystem::path& path, std::string_view bytes) {
  Descriptor file(path, O_WRONLY | O_CREAT | O_TRUNC);
  file.write_all(bytes.data(), bytes.size());
  file.sync();
  file.close();
}

ACCEL_DECL void sync_folder(const std::filesystem::path& folder) {
  Descriptor directory(folder, O_RDONLY | O_DIRECTORY);
  directory.sync();
}

ACCEL_DECL void exchange(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0)
    fail_errno(fmt::format("exchange '{}' with", a.string()), b);
}

ACCEL_DECL void rename(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail_errno(fmt::format("rename '{}' to", from.string()), to);
}

}  // namespace accel::state::posix
