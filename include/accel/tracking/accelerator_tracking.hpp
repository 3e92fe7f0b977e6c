// init_trackers / log / end_training on the Accelerator, as in Accelerate. The Accelerator
// inherits them from this base (CRTP: it reads the policies and the process from the derived
// class), so the tracking code lives here and accelerator_class.hpp only names the base.
//
//   accelerator.init_trackers("fashion_mnist", {{"lr", 1e-3}, {"batch_size", 64}});
//   accelerator.log({{"loss", loss}, {"lr", lr}}, step);
//   accelerator.end_training();
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tracker.hpp"
#include "values.hpp"

namespace accel::tracking {

template <class Derived>  // the Accelerator
class WithTrackers {
 public:
  // Starts a run: on the main process, a fresh folder <log_dir>/<project>/<run> with
  // config.json and run.json (tracker.hpp); on the others, nothing is written.
  void init_trackers(std::string_view project, const Config& config = {},
                     const TrackerOptions& options = {}) {
    const auto& self = static_cast<const Derived&>(*this);
    tracker_.start(project, config, options,
                   {Derived::parallelism_policy::name, Derived::precision_policy::name,
                    Derived::accumulation_steps, self.num_processes(), self.device().str()},
                   self.is_main_process());
  }

  // Appends one row of metrics at `step` (unset: the step after the last one logged). Written
  // by the main process, flushed before log() returns; every process checks the arguments.
  void log(const Metrics& values, std::optional<std::int64_t> step = std::nullopt) {
    tracker_.log(values, step);
  }

  // Ends the run (run.json: "finished"). Safe to call without a run.
  void end_training() { tracker_.finish(); }

  const Tracker& tracker() const { return tracker_; }

 protected:
  WithTrackers() = default;

 private:
  Tracker tracker_;
};

}  // namespace accel::tracking
