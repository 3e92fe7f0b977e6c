// Where a run's files go: <log_dir>/<project>/<run>, a folder made fresh for each run (never
// shared with an earlier one), and the small JSON files written whole beside the metrics.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "../detail/error.hpp"

namespace accel::tracking {

/// The log folder when TrackerOptions::log_dir is empty: ACCEL_LOG_DIR, else ./runs.
inline std::filesystem::path default_log_dir() {
  const char* set = std::getenv("ACCEL_LOG_DIR");
  return set != nullptr && *set != '\0' ? std::filesystem::path(set)
                                        : std::filesystem::path("runs");
}

/// A UTC time as 2026-12-01T05:47:39Z (with `for_folder`, dashes for colons and no Z).
inline std::string utc_time(std::chrono::system_clock::time_point when, bool for_folder = false) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char text[32];
  std::strftime(text, sizeof text, for_folder ? "%Y-%m-%dT%H-%M-%S" : "%Y-%m-%dT%H:%M:%SZ",
                &parts);
  return text;
}

/// A project or run name must be one folder name: `what` names it in the error.
inline void check_folder_name(std::string_view what, std::string_view name,
                              std::string_view example) {
  std::string_view problem;
  if (name.empty()) problem = "is empty";
  else if (name == "." || name == "..") problem = "is not a folder name";
  else if (name.find('/') != std::string_view::npos) problem = "contains '/'";
  else
    for (const char c : name)
      if (static_cast<unsigned char>(c) < 0x20) problem = "contains a control character";
  if (!problem.empty())
    detail::fail("init_trackers(): the {} '{}' {}; it becomes one folder name under the log "
                 "folder, e.g. \"{}\"",
                 what, name, problem, example);
}

/// Makes `<project_dir>/<name>`, or `<name>-2`, `<name>-3`, ... when taken: two runs started in the
/// same second (or given the same run_name) never write into one folder.
inline std::filesystem::path make_run_folder(const std::filesystem::path& project_dir,
                                             const std::string& name) {
  std::error_code error;
  std::filesystem::create_directories(project_dir, error);
  if (error)
    detail::fail("init_trackers(): cannot create the log folder {}: {}; choose a writable "
                 "log_dir (TrackerOptions::log_dir or ACCEL_LOG_DIR)",
                 project_dir.string(), error.message());
  for (int attempt = 1;; ++attempt) {
    const std::filesystem::path run =
        project_dir / (attempt == 1 ? name : fmt::format("{}-{}", name, attempt));
    if (std::filesystem::create_directory(run, error)) return run;
    if (error)
      detail::fail("init_trackers(): cannot create the run folder {}: {}; choose a writable "
                   "log_dir (TrackerOptions::log_dir or ACCEL_LOG_DIR)",
                   run.string(), error.message());
  }
}

/// Writes `text` to `path` whole: beside it first, then renamed over it, so that a reader (or a
/// crash) never sees half a file.
inline void write_whole_file(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path partial = path.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << text;
    out.flush();
    if (!out)
      detail::fail("cannot write {}: {}; is the disk full?", partial.string(),
                   std::strerror(errno));
  }
  std::filesystem::rename(partial, path);
}

/// This machine's name, as run.json records it.
inline std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace accel::tracking
