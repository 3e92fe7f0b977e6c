// init_trackers / log / log_text / end_training on the Accelerator, as in Accelerate. The
// Accelerator inherits them from this base (CRTP: it reads the policies and the process from the
// derived class), so the tracking code lives here and accelerator_class.hpp only names the base.
//
//   accelerator.init_trackers("fashion_mnist", {{"lr", 1e-3}, {"batch_size", 64}});
//   accelerator.log({{"loss", loss}, {"lr", lr}}, step);
//   accelerator.end_training();
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

#include "../logging/run_log.hpp"
#include "tracker.hpp"
#include "values.hpp"

namespace accel::tracking {

/// The Accelerator's init_trackers, log, log_text and end_training, over one Tracker.
template <class Derived>  // the Accelerator
class WithTrackers {
 public:
  /// Starts a run: on the main process, a fresh folder `<log_dir>/<project>/<run>` with
  /// config.json and run.json (tracker.hpp), and every tracker's start(); on the others, only
  /// the trackers that are not main_process_only start. From now on the main process's loggers
  /// also write to the folder's log.txt.
  void init_trackers(std::string_view project, const Config& config = {},
                     const TrackerOptions& options = {}) {
    // The up-call is the simplest honest form here: this base is a slice of the Accelerator's
    // public surface and the state it works on lives in the Accelerator; it reads that state
    // (and calls its public members), and nothing it calls comes back into this base.
    const auto& self = static_cast<const Derived&>(*this);
    tracker_.start(project, config, options,
                   {Derived::parallelism_policy::name, Derived::precision_policy::name,
                    Derived::accumulation_steps, self.num_processes(), self.device().str()},
                   self.is_main_process());
    if (!tracker_.run_dir().empty()) logging::open_run_log(run_log());
  }

  /// Appends one row of metrics at `step` (unset: the step after the last one logged). Written
  /// by the main process, flushed before log() returns; every process checks the arguments.
  void log(const Metrics& values, std::optional<std::int64_t> step = std::nullopt) {
    tracker_.log(values, step);
  }

  /// Text values at `step` (unset: as log()): metrics.jsonl and your trackers get them,
  /// metrics.csv does not (it holds numbers only).
  void log_text(const Texts& values, std::optional<std::int64_t> step = std::nullopt) {
    tracker_.log_text(values, step);
  }

  /// Ends the run (run.json: "finished"; every tracker's finish()). Safe to call without a run.
  void end_training() {
    if (!tracker_.run_dir().empty()) logging::close_run_log(run_log());
    tracker_.finish();
  }

  /// The run's folder `<log_dir>/<project>/<run>` on the main process while a run is open or
  /// after it ended; empty on the other processes and before init_trackers().
  const std::filesystem::path& run_dir() const { return tracker_.run_dir(); }

 protected:
  WithTrackers() = default;
  /// The run's trackers, for the Accelerator (profile(), the timeline) and
  /// accel::testing::internals (core/internals.hpp).
  const Tracker& run_tracker() const { return tracker_; }
  // Lines logged after the Accelerator is gone no longer go to its run's log.txt.
  ~WithTrackers() {
    if (tracker_.is_open() && !tracker_.run_dir().empty()) logging::close_run_log(run_log());
  }

 private:
  std::filesystem::path run_log() const { return tracker_.run_dir() / "log.txt"; }

  Tracker tracker_;
};

}  // namespace accel::tracking
