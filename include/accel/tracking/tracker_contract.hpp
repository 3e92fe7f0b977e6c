// What makes a type a tracker: the members init_trackers(), log(), log_text() and end_training()
// call, one concept per member, in the style of the strategy and precision contracts. accel's
// own writers of metrics.jsonl, metrics.csv and TensorBoard's event file are three such types
// (jsonl_writer.hpp, csv_writer.hpp, tensorboard_writer.hpp); a program's own (a W&B bridge, a
// test's recorder) is another, passed through TrackerOptions::trackers (any_tracker.hpp).
//
//   struct MyTracker {
//     std::string name() const { return "mine"; }
//     void start(const accel::tracking::RunStart& run);
//     void log(const accel::tracking::Scalars& values, std::int64_t step, double seconds);
//     void log_text(const accel::tracking::Texts& values, std::int64_t step, double seconds);
//     void finish();
//   };
//
// `seconds` is the time since init_trackers(), the same for every tracker in one call.
#pragma once

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "values.hpp"

namespace accel::tracking {

// What run.json says about the program, filled in by the Accelerator.
struct RunDescription {
  std::string_view parallelism, precision;
  int accumulation_steps = 1;
  int processes = 1;
  std::string device;
};

// What a tracker's start() is told about the run init_trackers() begins.
struct RunStart {
  std::string project;
  // The run folder's name on the main process (TrackerOptions::run_name elsewhere, maybe empty).
  std::string run_name;
  // <log_dir>/<project>/<run>, made before any tracker starts, so that a tracker may keep files
  // of its own there; empty on the other processes, where no folder is made.
  std::filesystem::path run_dir;
  Config config;
  RunDescription description;
  bool main_process = true;
};

template <class T>
concept NamedTracker = requires(const T& tracker) {
  { tracker.name() } -> std::convertible_to<std::string>;
};
template <class T>
concept StartsRuns = requires(T& tracker, const RunStart& run) { tracker.start(run); };
template <class T>
concept LogsScalars = requires(T& tracker, const Scalars& values, std::int64_t step,
                               double seconds) { tracker.log(values, step, seconds); };
template <class T>
concept LogsTexts = requires(T& tracker, const Texts& values, std::int64_t step,
                             double seconds) { tracker.log_text(values, step, seconds); };
template <class T>
concept FinishesRuns = requires(T& tracker) { tracker.finish(); };

template <class T>
concept TrackerContract =
    NamedTracker<T> && StartsRuns<T> && LogsScalars<T> && LogsTexts<T> && FinishesRuns<T>;

// Optional: a tracker that can undo its last log() or log_text() call (the JSONL writer cuts its
// last line off). When a tracker after it in the same call fails, and every tracker before the
// failing one can undo, the call is undone everywhere and refused, so that it may be made again
// (a full disk under metrics.csv takes metrics.jsonl's line back with it).
template <class T>
concept TakesBackLastCall = requires(T& tracker) {
  { tracker.take_back_last() } noexcept;
};

// Asserts each member, one message per member, and returns whether all are there; g++ names the
// tracker's type in the line before a message ("[with T = MyTracker]").
template <class T>
consteval bool tracker_meets_contract() {
  static_assert(NamedTracker<T>,
                "accel: a tracker needs `std::string name() const`: the name its errors are "
                "reported under, e.g. \"wandb\" (docs/how-to/tracking.md#trackers-of-your-own)");
  static_assert(StartsRuns<T>,
                "accel: a tracker needs `void start(const accel::tracking::RunStart& run)`: "
                "init_trackers() calls it with the project, the config and the run folder "
                "(docs/how-to/tracking.md#trackers-of-your-own)");
  static_assert(LogsScalars<T>,
                "accel: a tracker needs `void log(const accel::tracking::Scalars& values, "
                "std::int64_t step, double seconds)`: accelerator.log() calls it with the "
                "metrics (docs/how-to/tracking.md#trackers-of-your-own)");
  static_assert(LogsTexts<T>,
                "accel: a tracker needs `void log_text(const accel::tracking::Texts& values, "
                "std::int64_t step, double seconds)`: accelerator.log_text() calls it; leave "
                "its body empty if text means nothing to it "
                "(docs/how-to/tracking.md#trackers-of-your-own)");
  static_assert(FinishesRuns<T>,
                "accel: a tracker needs `void finish()`: end_training() calls it "
                "(docs/how-to/tracking.md#trackers-of-your-own)");
  return TrackerContract<T>;
}

}  // namespace accel::tracking
