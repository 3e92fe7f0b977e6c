// Tracker's calls (tracker.hpp); tracker.hpp includes it in header-only mode, impl/src.hpp in
// the separately compiled one.
#include <torch/version.h>

#include <algorithm>
#include <exception>
#include <limits>

#include "../../detail/error.hpp"
#include "../../version.hpp"
#include "../csv_writer.hpp"
#include "../../detail/json.hpp"
#include "../jsonl_writer.hpp"
#include "../run_folder.hpp"
#include "../tensorboard_writer.hpp"
#include "../tracker.hpp"

namespace accel::tracking {

template <class Call>
std::optional<std::string> Tracker::call_each(std::string_view call, std::int64_t step,
                                              Call&& one) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_).count();
  bool refusable = true;
  std::optional<std::string> failure;
  for (std::size_t i = 0; i < trackers_.size(); ++i) {
    try {
      one(trackers_[i], seconds);
    } catch (const std::exception& e) {
      const std::string what =
          fmt::format("{} at step {}: the tracker '{}' failed: {}", call, step,
                      trackers_[i].name(), detail::without_accel_prefix(e.what()));
      if (refusable) {
        for (std::size_t j = i; j-- > 0;) trackers_[j].take_back_last();
        detail::fail("{}", what);
      }
      if (!failure)
        failure = what + "; the trackers before it kept this call, so it counts as made: do "
                         "not make it again";
      continue;
    }
    refusable = refusable && trackers_[i].can_take_back();
  }
  return failure;
}

ACCEL_DECL void Tracker::start(std::string_view project, const Config& config,
                              const TrackerOptions& options,
                              const RunDescription& description, bool writes) {
  if (open_)
    detail::fail("init_trackers(\"{}\") while the run '{}/{}' is still open; call "
                 "end_training() before starting another run",
                 project, project_, run_name_);
  check_folder_name("project", project, "fashion_mnist");
  if (!options.run_name.empty()) check_folder_name("run_name", options.run_name, "baseline");
  if (options.backends.empty() && options.trackers.empty())
    detail::fail("init_trackers(): TrackerOptions::backends is empty; name at least one, e.g. "
                 "{{.backends = {{accel::tracking::Backend::jsonl}}}}, or pass trackers of your "
                 "own in TrackerOptions::trackers");
  std::unordered_set<std::string_view> keys;
  for (const auto& [key, value] : config)
    if (key.empty() || !keys.insert(key).second)
      detail::fail("init_trackers(): the config {} key '{}'; give each setting once, under a "
                   "name of its own",
                   key.empty() ? "has an empty" : "repeats the", key);

  // Nothing is kept until the run folder exists and every tracker has started: a refused
  // start leaves the tracker as it was, and init_trackers() may be called again.
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
    write_whole_file(run.run_dir_ / "config.json", config_json(config));
    run.write_run_json("running");
    // The writers in a fixed order, whatever the order of `backends`: metrics.jsonl and the
    // event file first, so that they can take their call back when metrics.csv (which cannot)
    // fails to take it.
    if (std::ranges::find(options.backends, Backend::jsonl) != options.backends.end())
      run.trackers_.push_back(make_tracker(JsonlWriter(options.sync)));
    if (std::ranges::find(options.backends, Backend::tensorboard) != options.backends.end())
      run.trackers_.push_back(make_tracker(TensorBoardWriter(options.sync)));
    if (std::ranges::find(options.backends, Backend::csv) != options.backends.end())
      run.trackers_.push_back(make_tracker(CsvWriter(options.sync)));
  } else {
    run.run_name_ = options.run_name;
  }
  for (const AnyTracker& yours : options.trackers)
    if (writes || !yours.main_process_only()) run.trackers_.push_back(yours);

  const RunStart begins{run.project_, run.run_name_, run.run_dir_, config, description, writes};
  for (std::size_t i = 0; i < run.trackers_.size(); ++i) {
    try {
      run.trackers_[i].start(begins);
    } catch (const std::exception& e) {
      // Those already started end their run (best effort: the error to report is this one).
      for (std::size_t j = 0; j < i; ++j) {
        try {
          run.trackers_[j].finish();
        } catch (const std::exception&) {
        }
      }
      detail::fail("init_trackers(\"{}\"): the tracker '{}' failed in start(): {}", project,
                   run.trackers_[i].name(), detail::without_accel_prefix(e.what()));
    }
  }
  run.open_ = true;
  run.clock_ = std::chrono::steady_clock::now();
  *this = std::move(run);
}

ACCEL_DECL void Tracker::log(const Metrics& values, std::optional<std::int64_t> step) {
  check_open("log()");
  Scalars numbers;
  numbers.reserve(values.size());
  std::unordered_set<std::string_view> names;
  for (const auto& [name, metric] : values) {
    check_name("log()", "metric", name, names);
    numbers.emplace_back(name, metric.number(name));
  }
  const std::int64_t at = step_of("log()", step);
  const auto failure = call_each("log()", at, [&](AnyTracker& tracker, double seconds) {
    tracker.log(numbers, at, seconds);
  });
  last_step_ = at;
  ++logged_;
  if (failure) detail::fail("{}", *failure);
}

ACCEL_DECL void Tracker::log_text(const Texts& values, std::optional<std::int64_t> step) {
  check_open("log_text()");
  std::unordered_set<std::string_view> names;
  for (const auto& [name, text] : values) check_name("log_text()", "text", name, names);
  const std::int64_t at = step_of("log_text()", step);
  const auto failure = call_each("log_text()", at, [&](AnyTracker& tracker, double seconds) {
    tracker.log_text(values, at, seconds);
  });
  last_step_ = at;
  if (failure) detail::fail("{}", *failure);
}

ACCEL_DECL void Tracker::finish() {
  if (!open_) return;
  if (writes_) write_run_json("finished");
  std::optional<std::string> failure;
  for (AnyTracker& tracker : trackers_) {
    try {
      tracker.finish();
    } catch (const std::exception& e) {
      if (!failure)
        failure = fmt::format("end_training(): the tracker '{}' failed in finish(): {}; the "
                              "run is ended for every tracker",
                              tracker.name(), detail::without_accel_prefix(e.what()));
    }
  }
  trackers_.clear();
  open_ = false;
  ended_ = true;
  if (failure) detail::fail("{}", *failure);
}

ACCEL_DECL void Tracker::check_open(std::string_view call) const {
  if (!open_)
    detail::fail("{} without an open run: {}; call accelerator.init_trackers(\"project\", "
                 "config) before logging",
                 call, ended_ ? "end_training() has ended it" : "init_trackers() was not called");
}

ACCEL_DECL std::int64_t Tracker::step_of(std::string_view call,
                                         std::optional<std::int64_t> step) const {
  if (step) {
    if (*step < 0)
      detail::fail("{}: the step {} is negative; steps count up from 0, e.g. "
                   "accelerator.completed_steps()",
                   call, *step);
    return *step;
  }
  if (!last_step_) return 0;
  if (*last_step_ == std::numeric_limits<std::int64_t>::max())
    detail::fail("{}: the step after {} does not fit std::int64_t; pass a step of your own as "
                 "{}'s second argument",
                 call, *last_step_, call);
  return *last_step_ + 1;
}

ACCEL_DECL void Tracker::check_name(std::string_view call, std::string_view what,
                                    std::string_view name,
                                    std::unordered_set<std::string_view>& seen) {
  if (name.empty())
    detail::fail("{}: a {} has an empty name; name each value, e.g. {{\"{}\", {}}}", call, what,
                 what == "metric" ? "loss" : "sample", what == "metric" ? "loss" : "text");
  if (name == "step" || name == "time")
    detail::fail("{}: '{}' is not a {} name of yours: the trackers write the step and the "
                 "seconds since init_trackers() in every row; pass the step as {}'s second "
                 "argument",
                 call, name, what, call);
  for (const char c : name)
    if (static_cast<unsigned char>(c) < 0x20)
      detail::fail("{}: the {} name '{}' contains a control character; use letters, digits "
                   "and punctuation",
                   call, what, name);
  if (!seen.insert(name).second)
    detail::fail("{}: the {} '{}' appears twice in one call; log each name once per step",
                 call, what, name);
}

ACCEL_DECL void Tracker::write_run_json(std::string_view status) {
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

}  // namespace accel::tracking
