// --rank-prefix: a worker's stdout and stderr arrive through pipes, and the launcher writes each
// whole line to its own stream as "[rank R] line". Lines of different ranks never interleave
// mid-line, which they can when workers share a terminal.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>

#include "file_descriptor.hpp"

namespace accel::launcher {

// Writes everything or gives up quietly: a closed or broken stdout must not stop supervision.
inline void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const auto written = ::write(fd, data.data(), data.size());
    if (written > 0) {
      data.remove_prefix(static_cast<std::size_t>(written));
    } else if (written < 0 && errno == EINTR) {
      continue;
    } else if (written < 0 && errno == EAGAIN) {
      pollfd ready{fd, POLLOUT, 0};
      ::poll(&ready, 1, 1000);
    } else {
      return;
    }
  }
}

class PrefixedStream {
 public:
  PrefixedStream(FileDescriptor source, int destination, int rank)
      : source_(std::move(source)),
        destination_(destination),
        prefix_("[rank " + std::to_string(rank) + "] ") {}

  [[nodiscard]] int fd() const noexcept { return source_.get(); }
  [[nodiscard]] bool open() const noexcept { return static_cast<bool>(source_); }

  // Reads what is there (the pipe is non-blocking) and writes out the complete lines. At end of
  // file, a last line without a newline is written with one, and the pipe is closed.
  void read_available() {
    char buffer[65536];
    // A bounded number of reads, so that one chatty worker cannot starve the others.
    for (int reads = 0; reads < 16; ++reads) {
      const auto count = ::read(source_.get(), buffer, sizeof buffer);
      if (count > 0) {
        pending_.append(buffer, static_cast<std::size_t>(count));
        continue;
      }
      if (count < 0 && errno == EINTR) continue;
      if (count < 0 && errno == EAGAIN) break;
      finish();  // end of file, or an error that will not go away
      return;
    }
    write_lines();
  }

  void finish() {
    if (!pending_.empty() && pending_.back() != '\n') pending_ += '\n';
    write_lines();
    source_.reset();
  }

 private:
  // A line longer than this is cut, so that a worker printing without newlines cannot make the
  // launcher hold unbounded output.
  static constexpr std::size_t longest_line = 1 << 20;

  void write_lines() {
    std::string out;
    std::size_t start = 0;
    for (;;) {
      const auto newline = pending_.find('\n', start);
      std::size_t length = 0;
      std::size_t next = 0;
      if (newline != std::string::npos) {
        length = newline - start;
        next = newline + 1;
      } else if (pending_.size() - start >= longest_line) {
        length = longest_line;
        next = start + longest_line;
      } else {
        break;
      }
      out += prefix_;
      out.append(pending_, start, length);
      out += '\n';
      start = next;
    }
    pending_.erase(0, start);
    write_all(destination_, out);
  }

  FileDescriptor source_;
  int destination_;
  std::string prefix_;
  std::string pending_;
};

}  // namespace accel::launcher
