// What a profile and the step timeline record while a program trains: accel's spans (span.hpp)
// arrive here, and the Recorder keeps them as trace events while the schedule records
// (options.hpp, schedule.hpp) and adds their exclusive times per phase for the timeline. One
// Accelerator owns one (created by Options::timeline or accelerator.profile()); at most one per
// process records at a time, published through `active_recorder` so that a span costs one
// atomic load and a branch when nothing records.
//
// A step ends when the window's last prepared optimizer step() returns: the Accelerator calls
// optimizer_stepped(), and the step is closed at the next span that starts outside any other
// (a second optimizer's step() of the same window still belongs to it), or at once when
// nothing records.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "../options/profiling.hpp"
#include "records.hpp"
#include "schedule.hpp"
#include "trace_file.hpp"

namespace accel::profiling {

class TorchOps;

class Recorder {
 public:
  ACCEL_DECL explicit Recorder(int rank);
  ACCEL_DECL ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // --- The trace (accelerator.profile()) ---
  // Starts recording into `file` (trace_rank<r>.json) on the schedule of `options`; `base_ns`:
  // the file's time zero on the system clock, the same on every rank (trace_file.hpp).
  ACCEL_DECL void start_trace(const ProfileOptions& options, std::filesystem::path file,
                              std::int64_t base_ns);
  // Ends it and writes the file (the steps recorded so far; a step under way keeps its spans).
  ACCEL_DECL void stop_trace();
  bool tracing() const { return tracing_; }
  const std::filesystem::path& trace_file() const { return file_; }
  // The trace's events not saved yet: each save (trace_file.hpp) adds them to the file and lets
  // them go, so that memory and the cost of a save do not grow with the profile (tests).
  const std::vector<SpanRecord>& events() const { return events_; }
  // What saving the last trace has written (tests).
  TraceWrites trace_writes() const { return trace_ ? trace_->writes() : TraceWrites{}; }

  // --- The timeline (Options::timeline) ---
  ACCEL_DECL void start_timeline();
  bool timeline() const { return timeline_; }
  std::size_t steps_ready() const { return steps_.size(); }
  // The finished steps not taken yet, in order.
  ACCEL_DECL std::vector<StepTimes> take_steps();
  // Closes a step whose optimizer stepped and that no span has closed yet (the run's last).
  ACCEL_DECL void close_pending_step();

  // --- Step boundaries and spans ---
  // The Accelerator: a prepared optimizer stepped at the end of window `window`.
  ACCEL_DECL void optimizer_stepped(std::int64_t window);
  // span.hpp: a span starts on the owner thread outside any other, of `phase`.
  ACCEL_DECL void top_level_span_begins(Phase phase);
  // span.hpp: a span ended; `exclusive_ns` is its time minus the spans inside it.
  ACCEL_DECL void record(const SpanRecord& span, Phase phase, std::int64_t exclusive_ns,
                         bool on_owner);
  std::thread::id owner() const { return owner_; }

  // The clock of every span: steady, in nanoseconds.
  ACCEL_DECL static std::int64_t now_ns();

 private:
  ACCEL_DECL void roll_over();
  ACCEL_DECL void enter(ScheduleAction action, std::int64_t at_ns);
  ACCEL_DECL void write_trace();
  ACCEL_DECL void claim(const char* what);
  ACCEL_DECL void publish();

  int rank_;
  std::thread::id owner_;
  bool claimed_ = false;

  bool tracing_ = false;
  ProfileOptions options_;
  std::filesystem::path file_;
  std::int64_t trace_step_ = 0;            // the schedule's step (0 at start_trace)
  ScheduleAction action_ = ScheduleAction::none;
  bool events_on_ = false;                 // spans are kept now
  std::int64_t recording_since_ns_ = 0;    // where the current recorded stretch began
  std::int64_t clock_offset_ns_ = 0;       // system clock minus steady clock, at start_trace
  std::int64_t base_ns_ = 0;               // the trace's time zero, system clock
  std::mutex events_mutex_;                // spans from other threads (CUDA's autograd threads)
  std::vector<SpanRecord> events_;
  std::vector<OpRecord> ops_;
  std::unique_ptr<TraceFile> trace_;       // the file being written, from start_trace
  std::unique_ptr<TorchOps> torch_ops_;

  bool timeline_ = false;
  std::array<std::int64_t, phase_count> totals_{};  // this step's exclusive ns per phase
  std::vector<StepTimes> steps_;

  std::int64_t step_start_ns_ = 0;
  struct Pending {
    std::int64_t window;
    std::int64_t end_ns;
  };
  std::optional<Pending> pending_;
  std::int64_t closed_window_ = -1;
};

namespace detail {
// The recorder spans report to, or null when none records: read by every span.
inline std::atomic<Recorder*> active_recorder{nullptr};
// The recorder that owns profiling in this process (two Accelerators cannot both record).
inline std::atomic<Recorder*> claimed_recorder{nullptr};
}  // namespace detail

}  // namespace accel::profiling

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/recorder.ipp"
#endif
