// Progress of a training run on the main process, as tqdm or Accelerate's progress bars show it:
//
//   on a terminal, one line redrawn in place:
//     [########............] 40% step 400/1000 | loss 0.4321 | 5321 samples/s | 0:12 left
//   otherwise (a file, a pipe, a launcher collecting output), a plain line now and then:
//     step 400/1000 | loss 0.4321 | 5321 samples/s | 0:12 left | 8.0 s
//
//   accel::Progress progress(accelerator, total_steps, {.samples_per_step = global_batch});
//   ... after each optimizer step: progress.update(step, {{"loss", loss}});
//
// Rates and the time left are measured from the first update, so that start-up (data loading,
// the first step's allocations) does not skew them. ACCEL_PROGRESS=bar|lines|off|auto replaces
// ProgressOptions::mode, so a run can be silenced without rebuilding.
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "../detail/error.hpp"
#include "values.hpp"

namespace accel {

/// How a Progress shows itself.
enum class ProgressMode {
  automatic,  ///< bar on a terminal, lines otherwise
  bar,        ///< one line redrawn in place (`\r`)
  lines,      ///< a plain line every ProgressOptions::every steps, and at the last one
  /// Nothing.
  off,
};

/// A Progress's knobs.
struct ProgressOptions {
  /// ACCEL_PROGRESS replaces it.
  ProgressMode mode = ProgressMode::automatic;
  /// Samples in one optimizer step over all processes (batch x accumulation x processes), for
  /// the samples/s figure; 0 leaves it out.
  std::int64_t samples_per_step = 0;
  /// Lines mode: a line every this many steps; 0: about 20 lines per run.
  std::int64_t every = 0;
  /// Bar mode: redrawn at most this often (and always at the last step).
  std::chrono::milliseconds refresh = std::chrono::milliseconds(100);
  /// Where it goes; null: stdout.
  std::FILE* out = nullptr;
};

namespace tracking {

/// 75 -> "1:15", 3725 -> "1:02:05".
inline std::string clock_text(double seconds) {
  const auto total = static_cast<std::int64_t>(std::max(0.0, seconds) + 0.5);
  const std::int64_t hours = total / 3600, minutes = total / 60 % 60, rest = total % 60;
  return hours > 0 ? fmt::format("{}:{:02}:{:02}", hours, minutes, rest)
                   : fmt::format("{}:{:02}", minutes, rest);
}

/// ACCEL_PROGRESS, when set, in place of `chosen`.
inline ProgressMode progress_mode_from_environment(ProgressMode chosen) {
  const char* set = std::getenv("ACCEL_PROGRESS");
  if (set == nullptr || *set == '\0') return chosen;
  const std::string_view value = set;
  if (value == "auto") return ProgressMode::automatic;
  if (value == "bar") return ProgressMode::bar;
  if (value == "lines") return ProgressMode::lines;
  if (value == "off") return ProgressMode::off;
  detail::fail("ACCEL_PROGRESS='{}' is not a progress mode; set it to auto, bar, lines or off, "
               "or unset it",
               value);
}

}  // namespace tracking

/// Progress of a training run on the main process, as tqdm or Accelerate's progress bars show
/// it: a bar on a terminal, a plain line now and then otherwise.
class Progress {
 public:
  /// Shown on `accelerator`'s main process only.
  template <class Accelerator>
    requires requires(const Accelerator& a) { a.is_main_process(); }
  Progress(const Accelerator& accelerator, std::int64_t total_steps, ProgressOptions options = {})
      : Progress(accelerator.is_main_process(), total_steps, options) {}

  /// Shown where `shown`; total_steps: the optimizer steps the run will take, at least 1.
  Progress(bool shown, std::int64_t total_steps, ProgressOptions options = {})
      : options_(options), total_(total_steps) {
    if (total_steps < 1)
      detail::fail("Progress: total_steps is {}; give the number of optimizer steps the run "
                   "will take, at least 1",
                   total_steps);
    if (options.every < 0)
      detail::fail("Progress: every is {}; give a number of steps, or 0 for about 20 lines",
                   options.every);
    if (options.samples_per_step < 0)
      detail::fail("Progress: samples_per_step is {}; give samples per optimizer step over all "
                   "processes, or 0",
                   options.samples_per_step);
    out_ = options.out != nullptr ? options.out : stdout;
    mode_ = tracking::progress_mode_from_environment(options.mode);
    if (mode_ == ProgressMode::automatic)
      mode_ = ::isatty(::fileno(out_)) == 1 ? ProgressMode::bar : ProgressMode::lines;
    if (!shown) mode_ = ProgressMode::off;
    every_ = options.every > 0 ? options.every : std::max<std::int64_t>(1, total_steps / 20);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { close(); }

  /// What the run shows: bar or lines (after the automatic choice), or off.
  ProgressMode mode() const { return mode_; }

  /// `step` optimizer steps are done (1 to total); `shown` are the figures to print with them.
  void update(std::int64_t step, const tracking::Metrics& shown = {}) {
    if (mode_ == ProgressMode::off) return;
    const auto now = std::chrono::steady_clock::now();
    if (!first_step_) {
      first_step_ = step;
      first_time_ = now;
    }
    const bool last = step >= total_;
    if (mode_ == ProgressMode::lines) {
      if (step % every_ != 0 && !last) return;
      const double elapsed = std::chrono::duration<double>(now - first_time_).count();
      std::fputs((text(step, shown, now) + fmt::format(" | {:.1f} s\n", elapsed)).c_str(), out_);
      std::fflush(out_);
      return;
    }
    if (drawn_ && !last && now - drawn_at_ < options_.refresh) return;
    std::string line = bar(step) + " " + text(step, shown, now);
    const std::size_t width = terminal_width();
    if (line.size() >= width) line.resize(width - 1);  // a wrapped line cannot be redrawn
    std::fputs(("\r" + line + "\x1b[K").c_str(), out_);  // \x1b[K: clear the rest of the line
    std::fflush(out_);
    drawn_ = true;
    drawn_at_ = now;
  }

  /// Ends the bar's line, so what follows starts on a line of its own. Called by the destructor.
  void close() {
    if (mode_ == ProgressMode::bar && drawn_) {
      std::fputs("\n", out_);
      std::fflush(out_);
    }
    drawn_ = false;
  }

 private:
  std::string bar(std::int64_t step) const {
    constexpr std::int64_t cells = 20;
    const std::int64_t done = std::clamp<std::int64_t>(step * cells / total_, 0, cells);
    return fmt::format("[{}{}] {:3}%", std::string(static_cast<std::size_t>(done), '#'),
                       std::string(static_cast<std::size_t>(cells - done), '.'),
                       std::clamp<std::int64_t>(step * 100 / total_, 0, 100));
  }

  std::string text(std::int64_t step, const tracking::Metrics& shown,
                   std::chrono::steady_clock::time_point now) const {
    std::string line = fmt::format("step {}/{}", step, total_);
    for (const auto& [name, metric] : shown)
      line += fmt::format(" | {} {:.4g}", name, metric.value(name));
    const double seconds = std::chrono::duration<double>(now - first_time_).count();
    const std::int64_t measured = step - *first_step_;
    if (measured > 0 && seconds > 0) {
      const double steps_per_second = static_cast<double>(measured) / seconds;
      if (options_.samples_per_step > 0)
        line += fmt::format(" | {:.0f} samples/s",
                            steps_per_second * static_cast<double>(options_.samples_per_step));
      line += fmt::format(" | {} left", tracking::clock_text(
                                            static_cast<double>(std::max<std::int64_t>(
                                                0, total_ - step)) / steps_per_second));
    }
    return line;
  }

  std::size_t terminal_width() const {
    winsize size{};
    if (::ioctl(::fileno(out_), TIOCGWINSZ, &size) == 0 && size.ws_col > 20) return size.ws_col;
    return 100;
  }

  ProgressOptions options_;
  std::int64_t total_;
  std::FILE* out_ = stdout;
  ProgressMode mode_ = ProgressMode::automatic;
  std::int64_t every_ = 1;
  std::optional<std::int64_t> first_step_;
  std::chrono::steady_clock::time_point first_time_, drawn_at_;
  bool drawn_ = false;
};

}  // namespace accel
