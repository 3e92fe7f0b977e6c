// The Chrome trace writer; trace_file.hpp includes it in header-only mode.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <tuple>
#include <utility>

#include "../../detail/error.hpp"
#include "../../detail/json.hpp"
#include "../../version.hpp"
#include "../trace_file.hpp"

namespace accel::profiling {

namespace trace_text {

// From the file's start to its second event (the rank's two metadata events), without a comma
// after it: every event after it comes as ",\n  {...}".
inline std::string head(int rank) {
  return fmt::format(
      "{{\"traceEvents\": [\n"
      "  {{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {0}, \"tid\": 0, \"args\": "
      "{{\"name\": \"rank {0}\"}}}},\n"
      "  {{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": {0}, \"tid\": 0, \"args\": "
      "{{\"sort_index\": {0}}}}}",
      rank);
}

// After the last event to the file's end; the same at every save of one file.
inline std::string tail(int rank, std::int64_t base_ns) {
  return fmt::format(
      "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {{\"accel\": \"{}.{}.{}\", \"rank\": "
      "{}, \"base_time_ns\": {}}}}}\n",
      ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH, rank, base_ns);
}

// The events of `spans` and `ops`, each after ",\n  ": a name event for each thread not in
// `named` (added to it), then the spans, parents first.
inline std::string events(int rank, const std::vector<SpanRecord>& spans,
                          const std::vector<OpRecord>& ops, const TraceClock& clock,
                          std::set<std::uint64_t>& named) {
  struct Event {
    std::uint64_t thread;
    std::int64_t start_ns;  // since base_ns
    std::int64_t duration_ns;
    std::string name;
    const char* category;
    std::int64_t bytes;
  };
  std::vector<Event> events;
  events.reserve(spans.size() + ops.size());
  for (const SpanRecord& span : spans) {
    std::string name = span.name;
    // "step 3", "allreduce #12"
    if (span.sequence >= 0)
      name += (std::strcmp(span.category, "step") == 0 ? " " : " #") + std::to_string(span.sequence);
    if (span.part == Part::issue) name += " (issue)";
    if (span.part == Part::wait) name += " (wait)";
    events.push_back({span.thread, span.start_ns + clock.clock_offset_ns - clock.base_ns,
                      span.end_ns - span.start_ns, std::move(name), span.category, span.bytes});
  }
  for (const OpRecord& op : ops)
    events.push_back({op.thread, op.start_ns - clock.base_ns, op.end_ns - op.start_ns, op.name,
                      "torch", 0});
  // Parents first: by thread, then start, then the longer one.
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.thread, a.start_ns, b.duration_ns) <
           std::tie(b.thread, b.start_ns, a.duration_ns);
  });

  std::string text;
  std::set<std::uint64_t> threads;
  for (const Event& event : events)
    if (!named.count(event.thread)) threads.insert(event.thread);
  for (const std::uint64_t thread : threads)
    text += fmt::format(
        ",\n  {{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"args\": "
        "{{\"name\": \"{}\"}}}}",
        rank, thread,
        thread == clock.owner_thread ? std::string("training thread")
                                     : fmt::format("thread {}", thread));
  named.insert(threads.begin(), threads.end());
  // Microseconds with three decimals: nanoseconds.
  auto microseconds = [](std::int64_t ns) {
    return fmt::format("{}{}.{:03}", ns < 0 ? "-" : "", std::abs(ns) / 1000, std::abs(ns) % 1000);
  };
  for (const Event& event : events) {
    text += fmt::format(
        ",\n  {{\"name\": {}, \"cat\": {}, \"ph\": \"X\", \"ts\": {}, \"dur\": {}, \"pid\": "
        "{}, \"tid\": {}",
        tracking::json::string(event.name), tracking::json::string(event.category),
        microseconds(event.start_ns), microseconds(std::max<std::int64_t>(event.duration_ns, 0)),
        rank, event.thread);
    if (event.bytes > 0) text += fmt::format(", \"args\": {{\"bytes\": {}}}", event.bytes);
    text += "}";
  }
  return text;
}

// Writes all of `text` at `offset` of `fd`; false (errno set) when it could not.
inline bool write_at(int fd, std::string_view text, std::int64_t offset) {
  while (!text.empty()) {
    const auto written = ::pwrite(fd, text.data(), text.size(), static_cast<off_t>(offset));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      if (written == 0) errno = ENOSPC;
      return false;
    }
    text.remove_prefix(static_cast<std::size_t>(written));
    offset += written;
  }
  return true;
}

}  // namespace trace_text

ACCEL_DECL std::string chrome_trace(int rank, const std::vector<SpanRecord>& spans,
                                    const std::vector<OpRecord>& ops,
                                    std::int64_t clock_offset_ns, std::int64_t base_ns,
                                    std::uint64_t owner_thread) {
  std::set<std::uint64_t> named;
  return trace_text::head(rank) +
         trace_text::events(rank, spans, ops, {clock_offset_ns, base_ns, owner_thread}, named) +
         trace_text::tail(rank, base_ns);
}

ACCEL_DECL TraceFile::TraceFile(std::filesystem::path file, int rank, TraceClock clock)
    : file_(std::move(file)),
      rank_(rank),
      clock_(clock),
      tail_(trace_text::tail(rank, clock.base_ns)) {}

ACCEL_DECL TraceFile::~TraceFile() { close(); }

ACCEL_DECL void TraceFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  closed_ = true;
}

ACCEL_DECL void TraceFile::save(const std::vector<SpanRecord>& spans,
                                const std::vector<OpRecord>& ops) {
  if (closed_) return;
  std::set<std::uint64_t> named = named_;
  const std::string events = trace_text::events(rank_, spans, ops, clock_, named);
  if (fd_ < 0) {
    // The first save: the whole file, beside its name, then renamed over it.
    const std::string text = trace_text::head(rank_) + events + tail_;
    const std::filesystem::path partial = file_.string() + ".partial";
    const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool written = fd >= 0 && trace_text::write_at(fd, text, 0);
    const int error = errno;
    std::error_code renamed;
    if (written) std::filesystem::rename(partial, file_, renamed);
    if (!written || renamed) {
      if (fd >= 0) ::close(fd);
      std::error_code ignored;
      std::filesystem::remove(partial, ignored);
      accel::detail::fail("profile(): cannot write the trace {}: {}; choose a writable folder "
                          "(ProfileOptions::output_dir) with room for it",
                          file_.string(), renamed ? renamed.message() : std::strerror(error));
    }
    fd_ = fd;
    events_end_ = static_cast<std::int64_t>(text.size() - tail_.size());
    named_ = std::move(named);
    ++writes_.saves;
    ++writes_.whole;
    writes_.bytes += static_cast<std::int64_t>(text.size());
    return;
  }
  if (events.empty()) return;
  // The new events over the old tail, and the tail after them: one write at the file's end.
  const std::string text = events + tail_;
  if (!trace_text::write_at(fd_, text, events_end_)) {
    const int error = errno;
    // Back to the saves before this one: the tail where it was (those bytes had room), and
    // nothing after it.
    const auto length = static_cast<off_t>(events_end_ + static_cast<std::int64_t>(tail_.size()));
    (void)trace_text::write_at(fd_, tail_, events_end_);
    while (::ftruncate(fd_, length) != 0 && errno == EINTR) {
    }
    accel::detail::fail("profile(): cannot add to the trace {}: {}; is the disk full? The file "
                        "holds the steps saved before this one",
                        file_.string(), std::strerror(error));
  }
  events_end_ += static_cast<std::int64_t>(events.size());
  named_ = std::move(named);
  ++writes_.saves;
  writes_.bytes += static_cast<std::int64_t>(text.size());
}

}  // namespace accel::profiling
