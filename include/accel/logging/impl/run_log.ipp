// The process's run log; run_log.hpp includes this file in header-only mode.
#pragma once

#include <filesystem>
#include <mutex>
#include <optional>
#include <string_view>

#include "../../detail/line_file.hpp"
#include "../run_log.hpp"

namespace accel::logging {

namespace detail {

struct RunLog {
  std::mutex mutex;
  std::filesystem::path path;             // empty: no run open
  std::optional<tracking::LineFile> file;  // opened at the first line
};

// One per program: a function's static, in the one definition header-only builds share (the
// function is inline) and separately compiled ones define once.
ACCEL_DECL RunLog& run_log() {
  static RunLog log;
  return log;
}

}  // namespace detail

ACCEL_DECL void open_run_log(const std::filesystem::path& file) {
  detail::RunLog& log = detail::run_log();
  const std::lock_guard<std::mutex> lock(log.mutex);
  log.file.reset();
  log.path = file;
}

ACCEL_DECL void close_run_log(const std::filesystem::path& file) noexcept {
  detail::RunLog& log = detail::run_log();
  const std::lock_guard<std::mutex> lock(log.mutex);
  if (log.path != file) return;
  log.file.reset();
  log.path.clear();
}

ACCEL_DECL void write_run_log(std::string_view line) {
  detail::RunLog& log = detail::run_log();
  const std::lock_guard<std::mutex> lock(log.mutex);
  if (log.path.empty()) return;
  if (!log.file) log.file.emplace(log.path, /*sync=*/false);
  log.file->append(line);
}

}  // namespace accel::logging
