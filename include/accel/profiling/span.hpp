// accel's own spans: forward, backward, each collective issued and waited for, the optimizer
// step, the data wait. A Span is a scope; when no profile or timeline records, constructing one
// is an atomic load of a pointer and a branch not taken, and destroying it a second branch, so
// that the training path pays nothing measurable for them (docs/how-to/profiling.md, "Cost").
//
//   profiling::Span span(profiling::Phase::forward, "forward");
//   profiling::Span wait(profiling::Phase::communication, "allreduce", sequence, bytes,
//                      profiling::Part::wait);
#pragma once

#include <cstdint>

#include "../detail/separate_compilation.hpp"
#include "recorder.hpp"

namespace accel::profiling {

class [[nodiscard]] Span {
 public:
  // `name`: static text (not copied). `sequence`: a collective's number in its group.
  Span(Phase phase, const char* name, std::int64_t sequence = -1, std::int64_t bytes = 0,
       Part part = Part::whole) {
    Recorder* recorder = detail::active_recorder.load(std::memory_order_relaxed);
    if (recorder != nullptr) [[unlikely]]
      begin(recorder, phase, name, sequence, bytes, part);
  }
  ~Span() {
    if (recorder_ != nullptr) [[unlikely]]
      end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  ACCEL_DECL void begin(Recorder* recorder, Phase phase, const char* name, std::int64_t sequence,
                        std::int64_t bytes, Part part);
  ACCEL_DECL void end() noexcept;

  Recorder* recorder_ = nullptr;
  // Set by begin() only: the off path stores nothing else.
  Span* parent_;  // the span this one runs inside, on this thread
  const char* name_;
  std::int64_t sequence_;
  std::int64_t bytes_;
  std::int64_t start_ns_;
  std::int64_t inner_ns_;  // time of the spans directly inside this one
  Phase phase_;
  Part part_;
  bool on_owner_;
};

// Leaves a scope out of the recording: accel's own bookkeeping (the timeline's all-gather and its
// log() calls), whose time then shows as idle in the step it falls in. Nothing inside the scope
// may start or stop a recording: its end puts back the recorder it found.
class [[nodiscard]] Unrecorded {
 public:
  Unrecorded() : saved_(detail::active_recorder.exchange(nullptr, std::memory_order_relaxed)) {}
  ~Unrecorded() { detail::active_recorder.store(saved_, std::memory_order_relaxed); }
  Unrecorded(const Unrecorded&) = delete;
  Unrecorded& operator=(const Unrecorded&) = delete;

 private:
  Recorder* saved_;
};

}  // namespace accel::profiling

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/span.ipp"
#endif
