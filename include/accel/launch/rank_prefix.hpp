// --rank-prefix: a worker's stdout and stderr arrive through pipes, and the launcher writes each
// whole line to its own stream as "[rank R] line". Lines of different ranks never interleave
// mid-line, which they can when workers share a terminal.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "../detail/separate_compilation.hpp"
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
  ACCEL_DECL void read_available(bool to_end = false);

  ACCEL_DECL void finish();

 private:
  // A line longer than this is cut, so that a worker printing without newlines cannot make the
  // launcher hold unbounded output.
  static constexpr std::size_t longest_line = 1 << 20;

  ACCEL_DECL void write_lines();

  FileDescriptor source_;
  OutputChannel* destination_;
  std::string prefix_;
  std::string pending_;
};

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/rank_prefix.ipp"
#endif
