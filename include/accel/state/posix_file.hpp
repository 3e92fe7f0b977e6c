// The few POSIX file operations a crash-safe checkpoint needs, each failing with the path and the
// system's reason: whole-file read and write, fsync of a file and of a folder (without which a
// rename may reach the disk before the data it names), and an atomic exchange of two folders.
#pragma once

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "../detail/error.hpp"

namespace accel::state::posix {

// "cannot <what> '<path>': <the system's reason>".
[[noreturn]] inline void fail_errno(std::string_view what, const std::filesystem::path& path) {
  const int code = errno;
  accel::detail::fail("cannot {} '{}': {}", what, path.string(), std::strerror(code));
}

// A file descriptor that is closed however the scope ends (close() to see its error).
class Descriptor {
 public:
  Descriptor(const std::filesystem::path& path, int flags, mode_t mode = 0644)
      : path_(path), fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)) {
    if (fd_ < 0) fail_errno("open", path);
  }
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  int get() const { return fd_; }
  // All of it, through partial writes and signals; at most 1 GiB a call (Linux moves at most
  // 2 GiB - 4 KiB in one).
  void write_all(const void* data, std::size_t size) {
    const char* at = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, at, std::min<std::size_t>(size, std::size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_errno("write", path_);
      at += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  void sync() {
    if (::fsync(fd_) != 0) fail_errno("fsync", path_);
  }
  void close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_errno("close", path_);
  }
  std::size_t size() const {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) fail_errno("stat", path_);
    return static_cast<std::size_t>(info.st_size);
  }
  // Reads exactly `size` bytes, or fails naming how many the file had.
  void read_exactly(void* data, std::size_t size) {
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

 private:
  std::filesystem::path path_;
  int fd_;
};

// The whole file, in one buffer.
inline std::string read_file(const std::filesystem::path& path) {
  Descriptor file(path, O_RDONLY);
  std::string bytes(file.size(), '\0');
  file.read_exactly(bytes.data(), bytes.size());
  return bytes;
}

// Written, flushed to the disk and closed; a failure names the file.
inline void write_file_synced(const std::filesystem::path& path, std::string_view bytes) {
  Descriptor file(path, O_WRONLY | O_CREAT | O_TRUNC);
  file.write_all(bytes.data(), bytes.size());
  file.sync();
  file.close();
}

// A folder's entries (a new name, a rename) reach the disk.
inline void sync_folder(const std::filesystem::path& folder) {
  Descriptor directory(folder, O_RDONLY | O_DIRECTORY);
  directory.sync();
}

// Swaps two existing folders in one step (Linux renameat2 RENAME_EXCHANGE): at every instant
// each name holds a complete folder.
inline void exchange(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0)
    fail_errno(fmt::format("exchange '{}' with", a.string()), b);
}

inline void rename(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail_errno(fmt::format("rename '{}' to", from.string()), to);
}

}  // namespace accel::state::posix
