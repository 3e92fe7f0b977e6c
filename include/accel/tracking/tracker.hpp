// A run's trackers: the run folder, accel's writers into it and the program's own trackers, as
// Accelerate's init_trackers / log / end_training drive them. Every process keeps one, so that a
// misuse (log() before init_trackers(), a bad metric) fails the same way on every rank; only the
// main process makes the folder, and only it calls the trackers that are main_process_only.
//
//   <log_dir>/<project>/<run>/
//     config.json     the configuration given to init_trackers, as one JSON object
//     run.json        accel and libtorch versions, strategy, processes, device, host, start and
//                     end times, and status: "running" until end_training() makes it "finished"
//     metrics.jsonl   one JSON object per log() call (jsonl_writer.hpp)
//     metrics.csv     the same as a table, one column per metric (csv_writer.hpp)
//     events.out.tfevents.<unix seconds>.<host>
//                     the same for TensorBoard, when asked for (tensorboard_writer.hpp)
//
// Each call goes to every tracker in order: accel's writers first, then TrackerOptions::trackers.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "any_tracker.hpp"
#include "tracker_contract.hpp"
#include "values.hpp"

namespace accel::tracking {

/// accel's writers: metrics.jsonl (JsonlWriter), metrics.csv (CsvWriter) and TensorBoard's
/// event file (TensorBoardWriter).
enum class Backend { jsonl, csv, tensorboard };

/// init_trackers()'s knobs: where the run goes and who gets its calls.
struct TrackerOptions {
  /// The folder that holds one folder per project. Empty: ACCEL_LOG_DIR, else ./runs.
  std::filesystem::path log_dir = {};
  /// The run's folder name. Empty: the UTC start time, 2026-12-01T05-47-39. A name already taken
  /// gets -2, -3, ...: a run never writes into another's folder.
  std::string run_name = {};
  /// accel's writers (metrics.jsonl, metrics.csv; Backend::tensorboard adds the event file);
  /// empty, with trackers of your own, for none.
  std::vector<Backend> backends = {Backend::jsonl, Backend::csv};
  /// fsync every line: the metrics survive a machine crash, not only a process crash.
  bool sync = false;
  /// Trackers of yours (make_tracker(), tracker_contract.hpp), called after the backends, in this
  /// order.
  std::vector<AnyTracker> trackers = {};
};

/// A run's trackers: the run folder, accel's writers into it and the program's own trackers.
class Tracker {
 public:
  Tracker() = default;
  /// Movable.
  Tracker(Tracker&&) = default;
  /// Movable.
  Tracker& operator=(Tracker&&) = default;
  /// Between start() and finish().
  bool is_open() const { return open_; }
  /// The run folder; empty on the processes that do not write (all but the main one).
  const std::filesystem::path& run_dir() const { return run_dir_; }

  /// `writes`: this is the main process, which makes the run folder and calls every tracker; the
  /// others call only the trackers that are not main_process_only.
  ACCEL_DECL void start(std::string_view project, const Config& config,
                        const TrackerOptions& options, const RunDescription& description,
                        bool writes);

  /// Records `values` at `step` (unset: the step after the last one logged, 0 at first). A
  /// negative step, and an unset one after INT64_MAX, are refused, naming the value.
  ACCEL_DECL void log(const Metrics& values, std::optional<std::int64_t> step);

  /// Records text values at `step`, as log() does numbers (and sharing its step counter).
  /// run.json's steps_logged counts log() calls only.
  ACCEL_DECL void log_text(const Texts& values, std::optional<std::int64_t> step);

  /// Closes the run: run.json says "finished", with its end time, and every tracker finishes,
  /// even after one of them fails (its error is thrown then). Without an open run it does
  /// nothing, so that a program may always call it.
  ACCEL_DECL void finish();

 private:
  ACCEL_DECL void check_open(std::string_view call) const;

  // The step a call is made at: `step`, or the one after the last logged; refused when
  // negative, or when the one after would not fit std::int64_t.
  ACCEL_DECL std::int64_t step_of(std::string_view call, std::optional<std::int64_t> step) const;

  // `what`: "metric" or "text"; `seen`: the names of this call so far.
  ACCEL_DECL static void check_name(std::string_view call, std::string_view what,
                                    std::string_view name,
                                    std::unordered_set<std::string_view>& seen);

  // Makes one log() or log_text() call on every tracker, in order, all with the same seconds.
  // A tracker that fails while every tracker before it can take its call back: they do, and
  // the call is refused (thrown at once; nothing of it is kept, so it may be made again: a full
  // disk under metrics.jsonl or metrics.csv). A later failure cannot be undone: the other
  // trackers still get the call, which counts as made, and the first such failure is returned,
  // to be thrown once the step is counted.
  template <class Call>
  std::optional<std::string> call_each(std::string_view call, std::int64_t step, Call&& one);

  ACCEL_DECL void write_run_json(std::string_view status);

  bool open_ = false, ended_ = false, writes_ = false;
  std::string project_, run_name_;
  std::filesystem::path run_dir_;
  RunDescription description_;
  std::chrono::system_clock::time_point started_;
  std::chrono::steady_clock::time_point clock_;
  std::optional<std::int64_t> last_step_;  // the last logged; none yet: the next is 0
  std::int64_t logged_ = 0;
  std::vector<AnyTracker> trackers_;  // this process's, in the order they are called
};

}  // namespace accel::tracking

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/tracker.ipp"
#endif
