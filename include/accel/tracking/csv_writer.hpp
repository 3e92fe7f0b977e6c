// metrics.csv: a header `step,time,<metric>...` and one row per log() call, an empty cell where
// a call did not log that metric. The columns are those seen so far, in the order first seen.
// A call that brings a new metric widens the file: it is rewritten once with the new column
// (beside the old one, then renamed over it, so a crash leaves either file whole), as
// Lightning's CSVLogger does. NaN and infinities are written nan, inf and -inf, which gnuplot,
// pandas and R all read.
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

#include "line_file.hpp"
#include "values.hpp"

namespace accel::tracking {

class CsvWriter {
 public:
  static constexpr const char* file_name = "metrics.csv";

  CsvWriter(const std::filesystem::path& run_dir, bool sync)
      : path_(run_dir / file_name), sync_(sync), file_(path_, sync) {
    file_.append(header());
  }

  void write(std::int64_t step, double seconds,
             const std::vector<std::pair<std::string, Number>>& values) {
    std::vector<std::string> added;
    for (const auto& [name, value] : values)
      if (column_of(name) < 0) added.push_back(name);
    if (!added.empty()) widen(added);

    std::vector<std::string> cells(columns_.size() + 2);
    cells[0] = fmt::format("{}", step);
    cells[1] = fmt::format("{}", seconds);
    for (const auto& [name, value] : values)
      cells[static_cast<std::size_t>(column_of(name)) + 2] = value.text();
    file_.append(row(cells));
  }

  // A cell quoted as RFC 4180 asks when it holds a comma or a quote.
  static std::string cell(std::string_view text) {
    if (text.find_first_of(",\"") == std::string_view::npos) return std::string(text);
    std::string quoted = "\"";
    for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }

 private:
  int column_of(std::string_view name) const {
    for (std::size_t i = 0; i < columns_.size(); ++i)
      if (columns_[i] == name) return static_cast<int>(i);
    return -1;
  }

  static std::string row(const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t i = 0; i < cells.size(); ++i) line += (i > 0 ? "," : "") + cells[i];
    return line;
  }

  std::string header() const {
    std::vector<std::string> cells{"step", "time"};
    for (const auto& column : columns_) cells.push_back(cell(column));
    return row(cells);
  }

  void widen(const std::vector<std::string>& added) {
    columns_.insert(columns_.end(), added.begin(), added.end());
    // Old rows get empty cells for the new columns: new columns go last, so a row only needs
    // commas at its end.
    const std::filesystem::path wider = path_.string() + ".widening";
    {
      std::ifstream in(path_);
      std::ofstream out(wider, std::ios::trunc);
      std::string line;
      std::getline(in, line);  // the old header
      out << header() << '\n';
      while (std::getline(in, line)) out << line << std::string(added.size(), ',') << '\n';
      out.flush();
      if (!in.eof() || !out)
        detail::fail("cannot rewrite {} with the new metric '{}': {}", path_.string(),
                     added.front(), std::strerror(errno));
    }
    file_.close();
    std::filesystem::rename(wider, path_);
    file_ = LineFile(path_, sync_);
  }

  std::filesystem::path path_;
  bool sync_;
  LineFile file_;
  std::vector<std::string> columns_;  // the metrics, after step and time
};

}  // namespace accel::tracking
