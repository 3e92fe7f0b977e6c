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
// thread, start and longest first, so that a span's parents come before it. Times are
// microseconds (with nanosecond decimals) since `base_ns` on the system clock, a time rank 0
// chose and every rank shares, so that the files of several ranks line up when merged; small
// numbers, exact in a double (microseconds since the epoch would round to 0.25 us).
// otherData.base_time_ns holds the base.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "records.hpp"

namespace accel::profiling {

// `clock_offset_ns`: the system clock minus the steady clock, which spans are timed with.
// `base_ns`: time zero of the file, on the system clock. `owner_thread`: the training thread's
// id, named so in the file.
ACCEL_DECL std::string chrome_trace(int rank, const std::vector<SpanRecord>& spans,
                                    const std::vector<OpRecord>& ops,
                                    std::int64_t clock_offset_ns, std::int64_t base_ns,
                                    std::uint64_t owner_thread);

// Writes `text` beside `file` and renames it over `file`: a reader never sees half a trace.
ACCEL_DECL void write_trace_file(const std::filesystem::path& file, const std::string& text);

}  // namespace accel::profiling

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/trace_file.ipp"
#endif
