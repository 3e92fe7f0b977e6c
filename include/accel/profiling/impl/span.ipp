// Span's recording path, taken only while a recorder is active; span.hpp includes it in
// header-only mode.
#pragma once

#include <ATen/record_function.h>

#include "../span.hpp"

namespace accel::profiling {

namespace detail {
// The innermost span open on this thread, so that a span's time is exclusive of those inside.
inline thread_local Span* current_span = nullptr;
}  // namespace detail

ACCEL_DECL void Span::begin(Recorder* recorder, Phase phase, const char* name,
                            std::int64_t sequence, std::int64_t bytes, Part part) {
  parent_ = detail::current_span;
  on_owner_ = std::this_thread::get_id() == recorder->owner();
  // A span outside any other may start the next step (recorder.hpp): before the clock is read,
  // so that writing a finished cycle's trace is not this span's time.
  if (on_owner_ && parent_ == nullptr && phase != Phase::optimizer)
    recorder->top_level_span_begins(phase);
  recorder_ = recorder;
  name_ = name;
  sequence_ = sequence;
  bytes_ = bytes;
  phase_ = phase;
  part_ = part;
  inner_ns_ = 0;
  detail::current_span = this;
  start_ns_ = Recorder::now_ns();
}

ACCEL_DECL void Span::end() noexcept {
  const std::int64_t end_ns = Recorder::now_ns();
  const std::int64_t duration = end_ns - start_ns_;
  detail::current_span = parent_;
  if (parent_ != nullptr) parent_->inner_ns_ += duration;
  SpanRecord span;
  span.name = name_;
  span.category = phase_names[static_cast<std::size_t>(phase_)];
  span.start_ns = start_ns_;
  span.end_ns = end_ns;
  span.sequence = sequence_;
  span.bytes = bytes_;
  span.thread = at::RecordFunction::currentThreadId();
  span.part = part_;
  recorder_->record(span, phase_, duration - inner_ns_, on_owner_);
}

}  // namespace accel::profiling
