// metrics.jsonl: one JSON object per log() call, {"step": 10, "time": 1.52, "loss": 0.31, ...},
// keys in the order logged, and one per log_text() call, its values as JSON strings. Every line
// is a complete record: readers need nothing else. A tracker (tracker_contract.hpp) like any
// other, which can also take its last line back (TakesBackLastCall).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "../detail/json.hpp"
#include "../detail/line_file.hpp"
#include "tracker_contract.hpp"
#include "values.hpp"

namespace accel::tracking {

/// The tracker that writes metrics.jsonl: one JSON object per log() or log_text() call.
class JsonlWriter {
 public:
  /// In the run's folder.
  static constexpr const char* file_name = "metrics.jsonl";

  /// `sync`: fsync every line (TrackerOptions::sync).
  explicit JsonlWriter(bool sync = false) : sync_(sync) {}

  /// The tracker's name.
  std::string name() const { return "jsonl"; }

  /// Makes metrics.jsonl in the run's folder.
  void start(const RunStart& run) { file_ = LineFile(run.run_dir / file_name, sync_); }

  /// One line of this call's numbers.
  void log(const Scalars& values, std::int64_t step, double seconds) {
    std::string line = begin_line(step, seconds);
    for (const auto& [name, value] : values)
      line += fmt::format(", {}: {}", json::string(name),
                          json::number(value.value, value.text()));
    append(line + "}");
  }

  /// One line of this call's texts, as JSON strings.
  void log_text(const Texts& values, std::int64_t step, double seconds) {
    std::string line = begin_line(step, seconds);
    for (const auto& [name, text] : values)
      line += fmt::format(", {}: {}", json::string(name), json::string(text));
    append(line + "}");
  }

  /// Closes the file.
  void finish() { file_.close(); }

  /// Cuts the last line written off again: the run does so when a tracker after this one could
  /// not take the same call (metrics.csv on a full disk), so that retrying it writes it once.
  void take_back_last() noexcept { file_.truncate_to(last_line_); }

 private:
  static std::string begin_line(std::int64_t step, double seconds) {
    return fmt::format("{{\"step\": {}, \"time\": {}", step, json::number(seconds));
  }

  void append(const std::string& line) {
    last_line_ = file_.size();
    file_.append(line);
  }

  bool sync_;
  LineFile file_;
  off_t last_line_ = 0;  // where the last line written starts
};

}  // namespace accel::tracking
