// A run's trackers: the run folder and the backends that write into it, as Accelerate's
// init_trackers / log / end_training drive them. Every process keeps one, so that a misuse
// (log() before init_trackers(), a bad metric) fails the same way on every rank; only the main
// process writes anything.
//
//   <log_dir>/<project>/<run>/
//     config.json     the configuration given to init_trackers, as one JSON object
//     run.json        accel and libtorch versions, strategy, processes, device, host, start and
//                     end times, and status: "running" until end_training() makes it "finished"
//     metrics.jsonl   one JSON object per log() call (jsonl_writer.hpp)
//     metrics.csv     the same as a table, one column per metric (csv_writer.hpp)
#pragma once

#include <torch/version.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../version.hpp"
#include "csv_writer.hpp"
#include "json.hpp"
#include "jsonl_writer.hpp"
#include "run_folder.hpp"
#include "values.hpp"

namespace accel::tracking {

enum class Backend { jsonl, csv };

struct TrackerOptions {
  // The folder that holds one folder per project. Empty: ACCEL_LOG_DIR, else ./runs.
  std::filesystem::path log_dir = {};
  // The run's folder name. Empty: the UTC start time, 2026-12-01T05-47-39. A name already taken
  // gets -2, -3, ...: a run never writes into another's folder.
  std::string run_name = {};
  std::vector<Backend> backends = {Backend::jsonl, Backend::csv};
  // fsync every line: the metrics survive a machine crash, not only a process crash.
  bool sync = false;
};

// What run.json says about the program, filled in by the Accelerator.
struct RunDescription {
  std::string_view parallelism, precision;
  int accumulation_steps = 1;
  int processes = 1;
  std::string device;
};

class Tracker {
 public:
  Tracker() = default;
  Tracker(Tracker&&) = default;
  Tracker& operator=(Tracker&&) = default;
  bool is_open() const { return open_; }
  // The run folder; empty on the processes that do not write (all but the main one).
  const std::filesystem::path& run_dir() const { return run_dir_; }

  void start(std::string_view project, const Config& config, const TrackerOptions& options,
             const RunDescription& description, bool writes) {
    if (open_)
      detail::fail("init_trackers(\"{}\") while the run '{}/{}' is still open; call "
                   "end_training() before starting another run",
                   project, project_, run_name_);
    check_folder_name("project", project, "fashion_mnist");
    if (!options.run_name.empty()) check_folder_name("run_name", options.run_name, "baseline");
    if (options.backends.empty())
      detail::fail("init_trackers(): TrackerOptions::backends is empty; name at least one, e.g. "
                   "{{.backends = {{accel::tracking::Backend::jsonl}}}}");
    std::unordered_set<std::string_view> keys;
    for (const auto& [key, value] : config)
      if (key.empty() || !keys.insert(key).second)
        detail::fail("init_trackers(): the config {} key '{}'; give each setting once, under a "
                     "name of its own",
                     key.empty() ? "has an empty" : "repeats the", key);

    // Nothing is kept until the run folder and its files exist: a refused start leaves the
    // tracker as it was, and init_trackers() may be called again.
    const auto started = std::chrono::system_clock::now();
    Tracker run;
    run.project_ = project;
    run.description_ = description;
    run.started_ = started;
    run.writes_ = writes;
    if (writes) {
      const std::filesystem::path log_dir =
          options.log_dir.empty() ? default_log_dir() : options.log_dir;
      run.run_dir_ = make_run_folder(
          log_dir / run.project_,
          options.run_name.empty() ? utc_time(started, /*for_folder=*/true) : options.run_name);
      run.run_name_ = run.run_dir_.filename().string();
      std::string text = "{";
      for (const auto& [key, value] : config)
        text += fmt::format("{}\n  {}: {}", text.size() > 1 ? "," : "", json::string(key),
                            value.to_json());
      write_whole_file(run.run_dir_ / "config.json", text + (config.empty() ? "}\n" : "\n}\n"));
      run.write_run_json("running");
      for (const Backend backend : options.backends) {
        if (backend == Backend::jsonl && !run.jsonl_) run.jsonl_.emplace(run.run_dir_, options.sync);
        if (backend == Backend::csv && !run.csv_) run.csv_.emplace(run.run_dir_, options.sync);
      }
    } else {
      run.run_name_ = options.run_name;
    }
    run.open_ = true;
    run.clock_ = std::chrono::steady_clock::now();
    *this = std::move(run);
  }

  // Records `values` at `step` (unset: the step after the last one logged, 0 at first).
  void log(const Metrics& values, std::optional<std::int64_t> step) {
    if (!open_)
      detail::fail("log() without an open run: {}; call accelerator.init_trackers(\"project\", "
                   "config) before logging",
                   ended_ ? "end_training() has ended it" : "init_trackers() was not called");
    std::vector<std::pair<std::string, Number>> numbers;
    numbers.reserve(values.size());
    std::unordered_set<std::string_view> names;
    for (const auto& [name, metric] : values) {
      check_metric_name(name);
      if (!names.insert(name).second)
        detail::fail("log(): the metric '{}' appears twice in one call; log each name once per "
                     "step",
                     name);
      numbers.emplace_back(name, metric.number(name));
    }
    const std::int64_t at = step.value_or(next_step_);
    if (writes_) write_both(at, numbers);
    next_step_ = at + 1;
    ++logged_;
  }

  // Closes the run: run.json says "finished", with its end time. Without an open run it does
  // nothing, so that a program may always call it.
  void finish() {
    if (!open_) return;
    if (writes_) write_run_json("finished");
    jsonl_.reset();
    csv_.reset();
    open_ = false;
    ended_ = true;
  }

 private:
  static void check_metric_name(std::string_view name) {
    if (name.empty())
      detail::fail("log(): a metric has an empty name; name each value, e.g. {{\"loss\", loss}}");
    if (name == "step" || name == "time")
      detail::fail("log(): '{}' is not a metric name of yours: the trackers write the step and "
                   "the seconds since init_trackers() in every row; pass the step as log()'s "
                   "second argument",
                   name);
    for (const char c : name)
      if (static_cast<unsigned char>(c) < 0x20)
        detail::fail("log(): the metric name '{}' contains a control character; use letters, "
                     "digits and punctuation",
                     name);
  }

  // One call's record in both files or in neither: each writer takes back its own partial
  // line, and the JSONL line is taken back when the CSV could not take the call (a full disk),
  // so that retrying the call after freeing space writes it once.
  void write_both(std::int64_t step, const std::vector<std::pair<std::string, Number>>& numbers) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_).count();
    const off_t jsonl_end = jsonl_ ? jsonl_->size() : 0;
    if (jsonl_) jsonl_->write(step, seconds, numbers);
    try {
      if (csv_) csv_->write(step, seconds, numbers);
    } catch (...) {
      if (jsonl_) jsonl_->take_back_to(jsonl_end);
      throw;
    }
  }

  void write_run_json(std::string_view status) {
    const auto now = std::chrono::system_clock::now();
    std::string text = "{\n";
    auto field = [&](std::string_view key, const std::string& json_value) {
      text += fmt::format("{}  {}: {}", text.size() > 2 ? ",\n" : "", json::string(key),
                          json_value);
    };
    field("project", json::string(project_));
    field("run", json::string(run_name_));
    field("status", json::string(status));
    field("started", json::string(utc_time(started_)));
    if (status == "finished") field("ended", json::string(utc_time(now)));
    field("steps_logged", fmt::format("{}", logged_));
    field("accel", json::string(fmt::format("{}.{}.{}", ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR,
                                            ACCEL_VERSION_PATCH)));
    field("libtorch", json::string(TORCH_VERSION));
    field("parallelism", json::string(description_.parallelism));
    field("precision", json::string(description_.precision));
    field("accumulation_steps", fmt::format("{}", description_.accumulation_steps));
    field("processes", fmt::format("{}", description_.processes));
    field("device", json::string(description_.device));
    field("host", json::string(host_name()));
    write_whole_file(run_dir_ / "run.json", text + "\n}\n");
  }

  bool open_ = false, ended_ = false, writes_ = false;
  std::string project_, run_name_;
  std::filesystem::path run_dir_;
  RunDescription description_;
  std::chrono::system_clock::time_point started_;
  std::chrono::steady_clock::time_point clock_;
  std::int64_t next_step_ = 0, logged_ = 0;
  std::optional<JsonlWriter> jsonl_;
  std::optional<CsvWriter> csv_;
};

}  // namespace accel::tracking
