// A file the trackers append to one whole line at a time (or one binary record: TensorBoard's
// event file): each line goes to the kernel in one write() before log() returns (no user-space
// buffer), so a process that crashes or is killed loses at most the line it was writing. With
// `sync`, each line is also fsync'ed, which survives a machine crash too and costs a disk flush
// per line.
// A line that cannot be written whole (a full disk) is taken back: the file is cut to its old
// length, so readers never see half a record; `size()` and `truncate_to()` let a caller take
// back a whole line when a write elsewhere that belongs with it fails.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "error.hpp"

namespace accel::tracking {

class LineFile {
 public:
  LineFile() = default;
  LineFile(std::filesystem::path path, bool sync) : path_(std::move(path)), sync_(sync) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0)
      detail::fail("cannot open {} for writing: {}; choose a writable log_dir "
                   "(TrackerOptions::log_dir or ACCEL_LOG_DIR)",
                   path_.string(), std::strerror(errno));
  }
  LineFile(LineFile&& other) noexcept { *this = std::move(other); }
  LineFile& operator=(LineFile&& other) noexcept {
    std::swap(fd_, other.fd_);
    std::swap(path_, other.path_);
    std::swap(sync_, other.sync_);
    return *this;
  }
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;
  ~LineFile() { close(); }

  bool is_open() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }

  // `line` without its newline.
  void append(std::string_view line) {
    std::string text;
    text.reserve(line.size() + 1);
    text.append(line).push_back('\n');
    append_whole(text, "line");
  }

  // `record`'s bytes as they are, whole or not at all, as append() writes a line.
  void append_record(std::string_view record) { append_whole(record, "record"); }

  // The file's length in bytes now.
  off_t size() const {
    struct stat status {};
    if (::fstat(fd_, &status) != 0)
      detail::fail("cannot read the length of {}: {}", path_.string(), std::strerror(errno));
    return status.st_size;
  }

  // Cuts the file back to `length` bytes (shrinking needs no free space). Best effort: it runs
  // on paths that are already reporting an error.
  void truncate_to(off_t length) noexcept {
    while (::ftruncate(fd_, length) != 0 && errno == EINTR) {
    }
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  // Writes `text` whole, or cuts the file back to where it began; `unit` names it in the error.
  void append_whole(std::string_view text, std::string_view unit) {
    std::string_view left = text;
    while (!left.empty()) {
      const auto written = ::write(fd_, left.data(), left.size());
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        const int error = written < 0 ? errno : ENOSPC;
        // Where the text began: what is there now, less what of it got in (O_APPEND, and only
        // this object writes the file). Found only on failure: no stat per write.
        truncate_to(size() - static_cast<off_t>(text.size() - left.size()));
        detail::fail("cannot write to {}: {}; is the disk full? Nothing of this {} was kept",
                     path_.string(), std::strerror(error), unit);
      }
      left.remove_prefix(static_cast<std::size_t>(written));
    }
    if (sync_) ::fsync(fd_);
  }

  int fd_ = -1;
  std::filesystem::path path_;
  bool sync_ = false;
};

}  // namespace accel::tracking
