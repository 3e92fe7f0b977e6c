// PrefixedStream; rank_prefix.hpp includes it in header-only mode.
#pragma once

#include "../rank_prefix.hpp"

namespace accel::launcher {

ACCEL_DECL void PrefixedStream::read_available(bool to_end) {
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

ACCEL_DECL void PrefixedStream::finish() {
  if (!pending_.empty() && pending_.back() != '\n') pending_ += '\n';
  write_lines();
  source_.reset();
}

ACCEL_DECL void PrefixedStream::write_lines() {
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

}  // namespace accel::launcher
