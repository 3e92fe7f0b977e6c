// metrics.jsonl: one JSON object per log() call, {"step": 10, "time": 1.52, "loss": 0.31, ...},
// keys in the order logged. Every line is a complete record: readers need nothing else.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "json.hpp"
#include "line_file.hpp"
#include "values.hpp"

namespace accel::tracking {

class JsonlWriter {
 public:
  static constexpr const char* file_name = "metrics.jsonl";

  JsonlWriter(const std::filesystem::path& run_dir, bool sync) : file_(run_dir / file_name, sync) {}

  void write(std::int64_t step, double seconds,
             const std::vector<std::pair<std::string, Number>>& values) {
    std::string line = fmt::format("{{\"step\": {}, \"time\": {}", step, json::number(seconds));
    for (const auto& [name, value] : values)
      line += fmt::format(", {}: {}", json::string(name),
                          json::number(value.value, value.text()));
    file_.append(line + "}");
  }

  // Where the next line starts, and taking back the lines written after it: the tracker uses
  // them to undo this file's line when metrics.csv could not take the same call.
  off_t size() const { return file_.size(); }
  void take_back_to(off_t length) noexcept { file_.truncate_to(length); }

 private:
  LineFile file_;
};

}  // namespace accel::tracking
