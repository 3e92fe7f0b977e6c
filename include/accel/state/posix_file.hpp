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
#include "../detail/separate_compilation.hpp"

namespace accel::state::posix {

// "cannot <what> '<path>': <the system's reason>".
[[noreturn]] ACCEL_DECL void fail_errno(std::string_view what, const std::filesystem::path& path);

// "a FIFO (named pipe)", "a character device", ...: what a path is, for an error.
ACCEL_DECL const char* kind_of_file(mode_t mode);

// A file descriptor that is closed however the scope ends (close() to see its error). It opens
// regular files only (with O_DIRECTORY, folders only): anything else (a FIFO, a device, a
// socket) is refused, naming the path and its kind, without waiting in open().
class Descriptor {
 public:
  ACCEL_DECL Descriptor(const std::filesystem::path& path, int flags, mode_t mode = 0644);
  ACCEL_DECL ~Descriptor();
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  int get() const { return fd_; }
  // All of it, through partial writes and signals; at most 1 GiB a call (Linux moves at most
  // 2 GiB - 4 KiB in one).
  ACCEL_DECL void write_all(const void* data, std::size_t size);
  ACCEL_DECL void sync();
  ACCEL_DECL void close();
  ACCEL_DECL std::size_t size() const;
  // Reads exactly `size` bytes, or fails naming how many the file had.
  ACCEL_DECL void read_exactly(void* data, std::size_t size);
  // `size` bytes from `offset` (pread: the descriptor's position stays where it was).
  ACCEL_DECL void read_at(void* data, std::size_t size, std::uint64_t offset);

 private:
  std::filesystem::path path_;
  int fd_;
};

// The whole file, in one buffer.
ACCEL_DECL std::string read_file(const std::filesystem::path& path);

// Written, flushed to the disk and closed; a failure names the file.
ACCEL_DECL void write_file_synced(const std::filesystem::path& path, std::string_view bytes);

// A folder's entries (a new name, a rename) reach the disk.
ACCEL_DECL void sync_folder(const std::filesystem::path& folder);

// Swaps two existing folders in one step (Linux renameat2 RENAME_EXCHANGE): at every instant
// each name holds a complete folder.
ACCEL_DECL void exchange(const std::filesystem::path& a, const std::filesystem::path& b);

ACCEL_DECL void rename(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace accel::state::posix

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/posix_file.ipp"
#endif
