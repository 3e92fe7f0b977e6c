// metrics.csv: a header `step,time,<metric>...` and one row per log() call, an empty cell where
// a call did not log that metric. The columns are those seen so far, in the order first seen.
// A call that brings a new metric widens the file: it is rewritten once with the new column
// (beside the old one, then renamed over it, so a crash leaves either file whole), as
// Lightning's CSVLogger does. A call that cannot be written whole changes nothing. NaN and
// infinities are written nan, inf and -inf, which gnuplot, pandas and R all read.
// A tracker (tracker_contract.hpp) like any other. It holds numbers only, so that every column
// charts (accel-plot): log_text() values go to metrics.jsonl and other trackers, not here.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/line_file.hpp"
#include "tracker_contract.hpp"
#include "values.hpp"

namespace accel::tracking {

/// The tracker that writes metrics.csv: one row per log() call, one column per metric.
class CsvWriter {
 public:
  /// In the run's folder.
  static constexpr const char* file_name = "metrics.csv";

  /// `sync`: fsync every row (TrackerOptions::sync).
  explicit CsvWriter(bool sync = false) : sync_(sync) {}

  /// The tracker's name.
  std::string name() const { return "csv"; }

  /// Makes metrics.csv in the run's folder, with the header of no metric yet.
  void start(const RunStart& run) {
    path_ = run.run_dir / file_name;
    columns_.clear();
    file_ = LineFile(path_, sync_);
    file_.append(header(columns_));
  }

  /// All or nothing: a call that cannot be written whole (a full disk) leaves the file and the
  /// columns as they were, and no .widening file behind.
  void log(const Scalars& values, std::int64_t step, double seconds) {
    std::vector<std::string> added;  // metrics this call brings, in its order
    for (const auto& [name, value] : values)
      if (column_of(columns_, name) < 0) added.push_back(name);

    std::vector<std::string> cells(columns_.size() + added.size() + 2);
    cells[0] = fmt::format("{}", step);
    cells[1] = fmt::format("{}", seconds);
    for (const auto& [name, value] : values) {
      int column = column_of(columns_, name);
      if (column < 0) column = static_cast<int>(columns_.size()) + column_of(added, name);
      cells[static_cast<std::size_t>(column) + 2] = value.text();
    }
    if (added.empty())
      file_.append(row(cells));
    else
      widen(added, row(cells));
  }

  /// Numbers only (above): text has no column here.
  void log_text(const Texts& /*values*/, std::int64_t /*step*/, double /*seconds*/) {}

  /// Closes the file.
  void finish() { file_.close(); }

  /// A cell quoted as RFC 4180 asks when it holds a comma or a quote.
  static std::string cell(std::string_view text) {
    if (text.find_first_of(",\"") == std::string_view::npos) return std::string(text);
    std::string quoted = "\"";
    for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }

 private:
  static int column_of(const std::vector<std::string>& columns, std::string_view name) {
    for (std::size_t i = 0; i < columns.size(); ++i)
      if (columns[i] == name) return static_cast<int>(i);
    return -1;
  }

  static std::string row(const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t i = 0; i < cells.size(); ++i) line += (i > 0 ? "," : "") + cells[i];
    return line;
  }

  static std::string header(const std::vector<std::string>& columns) {
    std::vector<std::string> cells{"step", "time"};
    for (const auto& column : columns) cells.push_back(cell(column));
    return row(cells);
  }

  // Rewrites the file with the `added` columns after the old ones and `last_row` at its end,
  // beside the old file, then renames it over: a crash or a full disk leaves one whole file or
  // the other.
  void widen(const std::vector<std::string>& added, const std::string& last_row) {
    std::vector<std::string> columns = columns_;
    columns.insert(columns.end(), added.begin(), added.end());
    const std::filesystem::path wider = path_.string() + ".widening";
    try {
      {
        std::ifstream in(path_);
        std::ofstream out(wider, std::ios::trunc);
        std::string line;
        std::getline(in, line);  // the old header
        out << header(columns) << '\n';
        // Old rows get empty cells for the new columns: new columns go last, so a row only
        // needs commas at its end.
        while (std::getline(in, line)) out << line << std::string(added.size(), ',') << '\n';
        out << last_row << '\n';
        out.flush();
        if (!in.eof() || !out)
          detail::fail("cannot rewrite {} with the new metric '{}': {}; is the disk full? The "
                       "file is as it was before this call",
                       path_.string(), added.front(), std::strerror(errno));
      }
      std::filesystem::rename(wider, path_);
    } catch (...) {
      std::error_code ignored;
      std::filesystem::remove(wider, ignored);
      throw;
    }
    columns_ = std::move(columns);
    file_.close();
    file_ = LineFile(path_, sync_);
  }

  std::filesystem::path path_;
  bool sync_;
  LineFile file_;
  std::vector<std::string> columns_;  // the metrics, after step and time
};

}  // namespace accel::tracking
