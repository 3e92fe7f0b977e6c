// --rank-prefix: a worker's stdout and stderr arrive through pipes, and the launcher writes each
// whole line to its own stream as "[rank R] line". Lines of different ranks never interleave
// mid-line, which they can when workers share a terminal.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "file_descriptor.hpp"
#include "output.hpp"

namespace accel::launcher {

class PrefixedStream {
 public:
  PrefixedStream(FileDescriptor source, OutputChannel& destination, int rank)
      : source_(std::move(source)),
        destination_(&destination),
        prefix_("[rank " + std::to_string(rank) + "] ") {}

  [[nodiscard]] int fd() const noexcept { return source_.get(); }
  [[nodiscard]] bool open() const noexcept { return static_cast<bool>(source_); }

  // Is what it reads taken now? When its destination's buffer is full the supervisor leaves the
  // pipe alone, and the worker waits in write() until there is room (back-pressure).
  [[nodiscard]] bool wanted() const { return destination_->has_room(); }

  // Reads what is there (the pipe is non-blocking) and queues the complete lines. At end of
  // file, a last line without a newline is queued with one, and the pipe is closed. With
  // `to_end` (every writer is gone, so the pipe holds at most its capacity) it reads past the
  // destination's bound.
  void read_available(bool to_end = false) {
    char buffer[65536];
    // A bounded number of reads, so that one chatty worker cannot starve the others.
    for (int reads = 0; reads < 16 && (to_end || wanted()); ++reads) {
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
    destination_->write(std::move(out));
  }

  FileDescriptor source_;
  OutputChannel* destination_;
  std::string prefix_;
  std::string pending_;
};

}  // namespace accel::launcher
