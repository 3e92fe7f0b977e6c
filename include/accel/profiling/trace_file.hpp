// The Chrome trace-event file of one rank (trace_rank<r>.json), which Perfetto
// (ui.perfetto.dev), chrome://tracing and speedscope open:
//
//   {"traceEvents": [
//     {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "rank 1"}},
//     {"name": "step 3", "cat": "step", "ph": "X", "ts": 1717.5, "dur": 912.25, "pid": 1, "tid": 1},
//     {"name": "allreduce #12 (wait)", "cat": "communication", "ph": "X", ..., "args": {"bytes": 4096}},
//     ...], "displayTimeUnit": "ms", "otherData": {...}}
//
// One process per rank (pid = rank), one thread per libtorch thread id; "X" events sorted by
// thread, start and longest first within each save, so that a span's parents come before it
// (a later save's spans all start after an earlier one's). Times are microseconds (with
// nanosecond decimals) since `base_ns` on the system clock, a time rank 0 chose and every rank
// shares, so that the files of several ranks line up when merged; small numbers, exact in a
// double (microseconds since the epoch would round to 0.25 us). otherData.base_time_ns holds
// the base.
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "records.hpp"

namespace accel::profiling {

// Where spans are placed in time. `clock_offset_ns`: the system clock minus the steady clock,
// which spans are timed with. `base_ns`: time zero of the file, on the system clock.
// `owner_thread`: the training thread's id, named so in the file.
struct TraceClock {
  std::int64_t clock_offset_ns = 0;
  std::int64_t base_ns = 0;
  std::uint64_t owner_thread = 0;
};

// A whole trace as text: the events of `spans` and `ops` between the file's head and tail.
ACCEL_DECL std::string chrome_trace(int rank, const std::vector<SpanRecord>& spans,
                                    const std::vector<OpRecord>& ops,
                                    std::int64_t clock_offset_ns, std::int64_t base_ns,
                                    std::uint64_t owner_thread);

// What writing one trace file has cost so far: tests read it to check that a save writes only
// what is new (and the file's few closing bytes), so that a long profile costs the same per step.
struct TraceWrites {
  std::int64_t saves = 0;  // save() calls that wrote
  std::int64_t whole = 0;  // of them, writes of the whole file (the first)
  std::int64_t bytes = 0;  // bytes written in all
};

// One rank's trace file, saved as often as the schedule asks. The first save writes the whole
// file beside its name and renames it over it, so a reader never sees half of it. Each later
// save adds the new events in place of the file's closing bytes and writes those again after
// them, in one write(): the file is valid JSON after every save and each save costs what it
// adds, however long the profile runs. A save that cannot be written whole (a full disk) puts
// the closing bytes back, so the file holds the saves before it.
class TraceFile {
 public:
  ACCEL_DECL TraceFile(std::filesystem::path file, int rank, TraceClock clock);
  ACCEL_DECL ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  // Adds `spans` and `ops` to the file; the first save writes it even with no events.
  ACCEL_DECL void save(const std::vector<SpanRecord>& spans, const std::vector<OpRecord>& ops);
  // Lets the file go; a later save() writes nothing.
  ACCEL_DECL void close();
  const TraceWrites& writes() const { return writes_; }

 private:
  std::filesystem::path file_;
  int rank_;
  TraceClock clock_;
  std::string tail_;                  // the closing bytes, after the last event
  std::set<std::uint64_t> named_;     // threads whose name event is written
  int fd_ = -1;                       // the file, open from the first save to close()
  std::int64_t events_end_ = 0;       // where the tail starts
  bool closed_ = false;
  TraceWrites writes_;
};

}  // namespace accel::profiling

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/trace_file.ipp"
#endif
