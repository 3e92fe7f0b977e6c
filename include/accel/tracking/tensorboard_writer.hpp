// events.out.tfevents.<unix seconds>.<host>: the run as TensorBoard reads it (`tensorboard
// --logdir <log_dir>` shows each run folder as a run), in TensorBoard's event file format
// (event_file.hpp): the format's version, the run's config as a text named "config" (the JSON of
// config.json, at step 0; none for an empty config), then one record per log() call (a float
// scalar per metric, the timeline's among them) and per log_text() call (a text per value).
// Each record goes to the kernel in one write() before log() returns, so a crash loses at most
// the record being written, which TensorBoard's reader then skips. A tracker (tracker_contract.hpp)
// like any other, which can take its last record back (TakesBackLastCall), as the JSONL writer
// takes its last line.
#pragma once

#include <fmt/format.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <string>
#include <string_view>

#include "../detail/line_file.hpp"
#include "event_file.hpp"
#include "run_folder.hpp"
#include "tracker_contract.hpp"
#include "values.hpp"

namespace accel::tracking {

/// The tracker that writes TensorBoard's event file: one record per log() or log_text() call.
class TensorBoardWriter {
 public:
  /// How the file's name starts in the run's folder; TensorBoard reads every file whose name
  /// holds "tfevents".
  static constexpr std::string_view file_prefix = "events.out.tfevents.";

  /// `sync`: fsync every record (TrackerOptions::sync).
  explicit TensorBoardWriter(bool sync = false) : sync_(sync) {}

  /// The tracker's name.
  std::string name() const { return "tensorboard"; }

  /// The file's name for a run started at `unix_seconds` on `host`, TensorBoard's own pattern.
  static std::string file_name(std::int64_t unix_seconds, std::string_view host) {
    return fmt::format("{}{}.{}", file_prefix, unix_seconds, host);
  }

  /// Makes the event file in the run's folder: the version record, then the config's.
  void start(const RunStart& run) {
    const auto now = std::chrono::system_clock::now();
    started_ = std::chrono::duration<double>(now.time_since_epoch()).count();
    file_ = LineFile(run.run_dir / file_name(std::chrono::system_clock::to_time_t(now),
                                             host_name()),
                     sync_);
    append(event_file::version_event(started_));
    if (!run.config.empty())
      append(event_file::texts_event({{"config", config_json(run.config)}}, 0, started_));
  }

  /// One record of this call's numbers, as floats (TensorBoard's scalars are float32).
  void log(const Scalars& values, std::int64_t step, double seconds) {
    append(event_file::scalars_event(values, step, started_ + seconds));
  }

  /// One record of this call's texts.
  void log_text(const Texts& values, std::int64_t step, double seconds) {
    append(event_file::texts_event(values, step, started_ + seconds));
  }

  /// Closes the file.
  void finish() { file_.close(); }

  /// Cuts the last record written off again: the run does so when a tracker after this one
  /// could not take the same call (metrics.csv on a full disk), so that retrying it writes it
  /// once.
  void take_back_last() noexcept { file_.truncate_to(last_record_); }

 private:
  void append(const std::string& event) {
    last_record_ = file_.size();
    file_.append_record(event_file::record(event));
  }

  bool sync_;
  LineFile file_;
  double started_ = 0;     // the run's start, in seconds since the Unix epoch: the records'
                           // wall time is this plus the seconds since init_trackers()
  off_t last_record_ = 0;  // where the last record written starts
};

}  // namespace accel::tracking
