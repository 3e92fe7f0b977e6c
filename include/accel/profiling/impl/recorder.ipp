// The Recorder; recorder.hpp includes it in header-only mode.
#pragma once

#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "../../detail/error.hpp"
#include "../recorder.hpp"
#include "../torch_ops.hpp"
#include "../trace_file.hpp"

namespace accel::profiling {

ACCEL_DECL Recorder::Recorder(int rank) : rank_(rank), owner_(std::this_thread::get_id()) {}

ACCEL_DECL Recorder::~Recorder() {
  if (!claimed_) return;
  detail::active_recorder.store(nullptr, std::memory_order_relaxed);
  detail::claimed_recorder.store(nullptr, std::memory_order_relaxed);
}

ACCEL_DECL std::int64_t Recorder::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ACCEL_DECL void Recorder::claim(const char* what) {
  if (claimed_) return;
  Recorder* none = nullptr;
  if (!detail::claimed_recorder.compare_exchange_strong(none, this))
    accel::detail::fail("{}: another Accelerator of this process is profiling or keeping a "
                        "timeline; one records at a time, so end its profile (or turn its "
                        "Options::timeline off) first",
                        what);
  claimed_ = true;
  owner_ = std::this_thread::get_id();
  step_start_ns_ = now_ns();
}

ACCEL_DECL void Recorder::publish() {
  const bool active = claimed_ && (events_on_ || timeline_);
  detail::active_recorder.store(active ? this : nullptr, std::memory_order_relaxed);
  if (claimed_ && !tracing_ && !timeline_) {
    detail::claimed_recorder.store(nullptr, std::memory_order_relaxed);
    claimed_ = false;
  }
}

ACCEL_DECL void Recorder::start_trace(const ProfileOptions& options, std::filesystem::path file,
                                      std::int64_t base_ns) {
  if (tracing_)
    accel::detail::fail("profile(): a profile of this Accelerator is already open (writing {}); "
                        "end it (let its scope close) before starting another",
                        file_.string());
  if (options.schedule) check_schedule(*options.schedule);
  claim("profile()");
  options_ = options;
  file_ = std::move(file);
  base_ns_ = base_ns;
  events_.clear();
  ops_.clear();
  trace_step_ = 0;
  events_on_ = false;
  // The two clocks read together: spans are timed on the steady clock and written on the
  // system clock's epoch, libtorch's.
  const auto system = std::chrono::system_clock::now();
  const std::int64_t steady = now_ns();
  clock_offset_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(system.time_since_epoch()).count() -
      steady;
  trace_ = std::make_unique<TraceFile>(
      file_, rank_, TraceClock{clock_offset_ns_, base_ns_, at::RecordFunction::currentThreadId()});
  tracing_ = true;
  try {
    enter(options_.schedule ? schedule_action(*options_.schedule, 0) : ScheduleAction::record,
          steady);
  } catch (...) {
    tracing_ = false;
    publish();
    throw;
  }
}

ACCEL_DECL void Recorder::stop_trace() {
  if (!tracing_) return;
  if (pending_) roll_over();  // the last step, when no span has closed it yet
  if (!tracing_) return;
  if (torch_ops_ && torch_ops_->running()) {
    std::vector<OpRecord> ops = torch_ops_->stop();
    if (events_on_)
      for (OpRecord& op : ops)
        if (op.start_ns >= recording_since_ns_ + clock_offset_ns_) ops_.push_back(std::move(op));
  }
  tracing_ = false;
  events_on_ = false;
  publish();
  try {
    write_trace();
  } catch (...) {
    trace_->close();
    throw;
  }
  trace_->close();
}

ACCEL_DECL void Recorder::start_timeline() {
  claim("Options::timeline");
  timeline_ = true;
  publish();
}

ACCEL_DECL std::vector<StepTimes> Recorder::take_steps() { return std::exchange(steps_, {}); }

ACCEL_DECL void Recorder::close_pending_step() {
  if (pending_) roll_over();
}

ACCEL_DECL void Recorder::optimizer_stepped(std::int64_t window) {
  if (!claimed_ || window == closed_window_) return;
  pending_ = Pending{window, now_ns()};
  // Nothing records: no span will close the step, and there is nothing of it to keep.
  if (detail::active_recorder.load(std::memory_order_relaxed) != this) roll_over();
}

ACCEL_DECL void Recorder::top_level_span_begins(Phase /*phase*/) {
  if (pending_) roll_over();
}

ACCEL_DECL void Recorder::record(const SpanRecord& span, Phase phase, std::int64_t exclusive_ns,
                                 bool on_owner) {
  if (timeline_ && on_owner) totals_[static_cast<std::size_t>(phase)] += exclusive_ns;
  if (events_on_) {
    const std::lock_guard<std::mutex> lock(events_mutex_);
    events_.push_back(span);
  }
}

ACCEL_DECL void Recorder::roll_over() {
  const Pending ended = *pending_;
  pending_.reset();
  closed_window_ = ended.window;
  if (timeline_) {
    StepTimes step;
    step.step = ended.window;
    step.total = static_cast<double>(ended.end_ns - step_start_ns_) * 1e-9;
    double inside = 0;
    for (std::size_t p = 0; p < phase_count; ++p) {
      step.phases[p] = static_cast<double>(totals_[p]) * 1e-9;
      inside += step.phases[p];
    }
    step.idle = std::max(0.0, step.total - inside);
    steps_.push_back(step);
  }
  totals_.fill(0);
  if (events_on_) {
    SpanRecord span;
    span.name = "step";
    span.category = "step";
    span.start_ns = std::max(step_start_ns_, recording_since_ns_);
    span.end_ns = ended.end_ns;
    span.sequence = ended.window;
    span.thread = at::RecordFunction::currentThreadId();
    const std::lock_guard<std::mutex> lock(events_mutex_);
    events_.push_back(span);
  }
  step_start_ns_ = ended.end_ns;
  if (!tracing_) return;
  if (action_ == ScheduleAction::record_and_save) {
    if (torch_ops_ && torch_ops_->running())
      for (OpRecord& op : torch_ops_->stop())
        if (op.start_ns >= recording_since_ns_ + clock_offset_ns_ &&
            op.end_ns <= ended.end_ns + clock_offset_ns_)
          ops_.push_back(std::move(op));
    events_on_ = false;
    write_trace();
  }
  ++trace_step_;
  enter(options_.schedule ? schedule_action(*options_.schedule, trace_step_)
                          : ScheduleAction::record,
        ended.end_ns);
}

ACCEL_DECL void Recorder::enter(ScheduleAction action, std::int64_t at_ns) {
  action_ = action;
  const bool records = action == ScheduleAction::record || action == ScheduleAction::record_and_save;
  if (records && !events_on_) recording_since_ns_ = at_ns;
  events_on_ = records;
  if (options_.torch_ops && action != ScheduleAction::none) {
    if (!torch_ops_) torch_ops_ = std::make_unique<TorchOps>();
    if (!torch_ops_->running()) torch_ops_->start();
  }
  publish();
}

ACCEL_DECL void Recorder::write_trace() {
  std::vector<SpanRecord> spans;
  {
    const std::lock_guard<std::mutex> lock(events_mutex_);
    spans = events_;
  }
  trace_->save(spans, ops_);
  // In the file now: let them go, so that the next save adds only what is new. Kept when the
  // save failed, for the next one to write.
  {
    const std::lock_guard<std::mutex> lock(events_mutex_);
    events_.erase(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(spans.size()));
  }
  ops_.clear();
}

}  // namespace accel::profiling
