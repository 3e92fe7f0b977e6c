// What accel's profiling records, as plain values: the phases a span's time goes to, a finished
// span, one of libtorch's operator events, and one step of the timeline. The recorder
// (recorder.hpp) makes them; the trace writer (trace_file.hpp) and the timeline (timeline.hpp)
// read them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace accel::profiling {

// Where a span's time goes in the timeline. A span's time is exclusive of the spans inside it:
// a collective waited for inside backward counts as communication, not backward.
enum class Phase : std::uint8_t { data, forward, backward, communication, optimizer };
inline constexpr std::size_t phase_count = 5;
inline constexpr std::array<const char*, phase_count> phase_names = {
    "data", "forward", "backward", "communication", "optimizer"};

// A collective started now and waited for later shows as two spans, its issue and its wait; a
// blocking one as one.
enum class Part : std::uint8_t { whole, issue, wait };

// One finished span, as the trace writes it.
struct SpanRecord {
  const char* name = "";       // static text: "forward", "allreduce", "step"
  const char* category = "";   // a phase's name, or "step"
  std::int64_t start_ns = 0;   // steady clock
  std::int64_t end_ns = 0;
  std::int64_t sequence = -1;  // a collective's number in its group, a step's number; -1: none
  std::int64_t bytes = 0;      // a collective's payload; 0: none
  std::uint64_t thread = 0;    // libtorch's thread id (at::RecordFunction::currentThreadId())
  Part part = Part::whole;
};

// One of libtorch's operator events (torch_ops.hpp), on the system clock.
struct OpRecord {
  std::string name;
  std::int64_t start_ns = 0;  // ns since the epoch, as libtorch's profiler reports them
  std::int64_t end_ns = 0;
  std::uint64_t thread = 0;
};

// One optimizer step of the timeline, in seconds, on this rank.
struct StepTimes {
  std::int64_t step = 0;  // completed_steps() once it ended (the first step is 1)
  double total = 0;       // from the end of the previous step's optimizer step to this one's
  std::array<double, phase_count> phases{};
  double idle = 0;        // total minus the phases: the loss, user code, logging, waiting
};

}  // namespace accel::profiling
