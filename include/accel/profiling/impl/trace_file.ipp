// The Chrome trace writer; trace_file.hpp includes it in header-only mode.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <tuple>

#include "../../detail/error.hpp"
#include "../../tracking/json.hpp"
#include "../../version.hpp"
#include "../trace_file.hpp"

namespace accel::profiling {

ACCEL_DECL std::string chrome_trace(int rank, const std::vector<SpanRecord>& spans,
                                    const std::vector<OpRecord>& ops,
                                    std::int64_t clock_offset_ns, std::int64_t base_ns,
                                    std::uint64_t owner_thread) {
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
    events.push_back({span.thread, span.start_ns + clock_offset_ns - base_ns,
                      span.end_ns - span.start_ns,
                      std::move(name), span.category, span.bytes});
  }
  for (const OpRecord& op : ops)
    events.push_back({op.thread, op.start_ns - base_ns, op.end_ns - op.start_ns, op.name, "torch",
                      0});
  // Parents first: by thread, then start, then the longer one.
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.thread, a.start_ns, b.duration_ns) <
           std::tie(b.thread, b.start_ns, a.duration_ns);
  });

  std::string text = "{\"traceEvents\": [\n";
  text += fmt::format(
      "  {{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {0}, \"tid\": 0, \"args\": "
      "{{\"name\": \"rank {0}\"}}}},\n"
      "  {{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": {0}, \"tid\": 0, \"args\": "
      "{{\"sort_index\": {0}}}}}",
      rank);
  std::set<std::uint64_t> threads;
  for (const Event& event : events) threads.insert(event.thread);
  for (const std::uint64_t thread : threads)
    text += fmt::format(
        ",\n  {{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"args\": "
        "{{\"name\": \"{}\"}}}}",
        rank, thread,
        thread == owner_thread ? std::string("training thread")
                               : fmt::format("thread {}", thread));
  // Microseconds with three decimals: nanoseconds.
  auto microseconds = [](std::int64_t ns) {
    return fmt::format("{}{}.{:03}", ns < 0 ? "-" : "", std::abs(ns) / 1000, std::abs(ns) % 1000);
  };
  for (const Event& event : events) {
    text += fmt::format(
        ",\n  {{\"name\": {}, \"cat\": \"{}\", \"ph\": \"X\", \"ts\": {}, \"dur\": {}, \"pid\": "
        "{}, \"tid\": {}",
        tracking::json::string(event.name), event.category, microseconds(event.start_ns),
        microseconds(std::max<std::int64_t>(event.duration_ns, 0)), rank, event.thread);
    if (event.bytes > 0) text += fmt::format(", \"args\": {{\"bytes\": {}}}", event.bytes);
    text += "}";
  }
  text += fmt::format(
      "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {{\"accel\": \"{}.{}.{}\", \"rank\": "
      "{}, \"base_time_ns\": {}}}}}\n",
      ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH, rank, base_ns);
  return text;
}

ACCEL_DECL void write_trace_file(const std::filesystem::path& file, const std::string& text) {
  const std::filesystem::path partial = file.string() + ".partial";
  std::FILE* out = std::fopen(partial.c_str(), "wb");
  bool written = out != nullptr && std::fwrite(text.data(), 1, text.size(), out) == text.size();
  const int error = errno;
  if (out != nullptr) written = std::fclose(out) == 0 && written;
  std::error_code renamed;
  if (written) std::filesystem::rename(partial, file, renamed);
  if (!written || renamed) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    accel::detail::fail("profile(): cannot write the trace {}: {}; choose a writable folder "
                        "(ProfileOptions::output_dir) with room for it",
                        file.string(), renamed ? renamed.message() : std::strerror(error));
  }
}

}  // namespace accel::profiling
