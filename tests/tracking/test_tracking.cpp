// init_trackers / log / end_training on one process: the run folder, its four files, what they
// hold while the run goes on and after it, and every misuse refused with an accel: error;
// trackers of the program's own beside accel's writers, and their failures.
#include <accel/accelerator.hpp>
#include <accel/tracking/crc32c.hpp>
#include <accel/tracking/run_folder.hpp>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <stdexcept>
#include <sys/resource.h>
#include <csignal>

#include "../unit/helpers.hpp"
#include "files.hpp"

using accel::testing::internals;

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace tracking_tracking {

namespace fs = std::filesystem;
using tracking_test::read_lines;
using tracking_test::read_text;
using tracking_test::split;
using tracking_test::TemporaryFolder;

namespace {

// A JSON line with its time value replaced by T (the only field that varies between runs).
std::string without_time(const std::string& line) {
  return std::regex_replace(line, std::regex("\"time\": [^,}]+"), "\"time\": T");
}

}  // namespace

TEST_CASE("a run folder holds config.json, run.json and the metrics, written as they are logged") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> accelerator;
  accelerator.init_trackers("regression",
                            {{"lr", 1e-3}, {"batch_size", 64}, {"strategy", "ddp"},
                             {"shuffle", true}, {"note", "a \"quoted\"\nline"}},
                            {.log_dir = logs.path(), .run_name = "first"});
  const fs::path run = logs.path() / "regression" / "first";
  CHECK(internals(accelerator).tracker().run_dir() == run);
  CHECK(read_text(run / "config.json") ==
        "{\n  \"lr\": 0.001,\n  \"batch_size\": 64,\n  \"strategy\": \"ddp\",\n"
        "  \"shuffle\": true,\n  \"note\": \"a \\\"quoted\\\"\\nline\"\n}\n");

  const std::string started = read_text(run / "run.json");
  CHECK(started.find("\"status\": \"running\"") != std::string::npos);
  CHECK(started.find(fmt::format("\"libtorch\": \"{}\"", TORCH_VERSION)) != std::string::npos);
  CHECK(started.find(fmt::format("\"accel\": \"{}.{}.{}\"", ACCEL_VERSION_MAJOR,
                                 ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH)) != std::string::npos);
  CHECK(started.find("\"parallelism\": \"Ddp\"") != std::string::npos);
  CHECK(started.find("\"precision\": \"Fp32\"") != std::string::npos);
  CHECK(started.find("\"accumulation_steps\": 2") != std::string::npos);
  CHECK(started.find("\"processes\": 1") != std::string::npos);
  CHECK(started.find("\"ended\"") == std::string::npos);

  accelerator.log({{"loss", torch::tensor(0.5)}, {"lr", 1e-3}}, 10);
  // Already on disk, before any end_training(): a crash now loses nothing logged.
  REQUIRE(read_lines(run / "metrics.jsonl").size() == 1);
  CHECK(without_time(read_lines(run / "metrics.jsonl")[0]) ==
        R"({"step": 10, "time": T, "loss": 0.5, "lr": 0.001})");
  accelerator.log({{"loss", 0.25F}, {"lr", 5e-4}}, 20);

  const auto jsonl = read_lines(run / "metrics.jsonl");
  REQUIRE(jsonl.size() == 2);
  CHECK(without_time(jsonl[1]) == R"({"step": 20, "time": T, "loss": 0.25, "lr": 0.0005})");
  const auto csv = read_lines(run / "metrics.csv");
  REQUIRE(csv.size() == 3);
  CHECK(csv[0] == "step,time,loss,lr");
  const auto row = split(csv[2]);
  REQUIRE(row.size() == 4);
  CHECK(row[0] == "20");
  CHECK(std::stod(row[1]) >= 0.0);
  CHECK(row[2] == "0.25");
  CHECK(row[3] == "0.0005");

  accelerator.end_training();
  const std::string ended = read_text(run / "run.json");
  CHECK(ended.find("\"status\": \"finished\"") != std::string::npos);
  CHECK(ended.find("\"ended\": \"20") != std::string::npos);
  CHECK(ended.find("\"steps_logged\": 2") != std::string::npos);
  // Nothing else in the folder: no partial files left behind.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(run)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"config.json", "metrics.csv", "metrics.jsonl",
                                          "run.json"});
}

TEST_CASE("a metric first logged later widens the CSV and earlier rows get empty cells") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("widen", {}, {.log_dir = logs.path(), .run_name = "r"});
  accelerator.log({{"loss", 1.0}}, 1);
  accelerator.log({{"loss", 0.5}}, 2);
  accelerator.log({{"accuracy", 0.75}, {"loss", 0.25}}, 3);
  accelerator.log({{"accuracy", 0.875}}, 4);
  accelerator.end_training();
  const auto csv = read_lines(logs.path() / "widen" / "r" / "metrics.csv");
  REQUIRE(csv.size() == 5);
  CHECK(csv[0] == "step,time,loss,accuracy");
  auto cells = [&](std::size_t i) {
    auto row = split(csv[i]);
    row.erase(row.begin() + 1);  // the time
    return row;
  };
  CHECK(cells(1) == std::vector<std::string>{"1", "1", ""});
  CHECK(cells(2) == std::vector<std::string>{"2", "0.5", ""});
  CHECK(cells(3) == std::vector<std::string>{"3", "0.25", "0.75"});
  CHECK(cells(4) == std::vector<std::string>{"4", "", "0.875"});
  CHECK_FALSE(fs::exists(logs.path() / "widen" / "r" / "metrics.csv.widening"));
}

TEST_CASE("without a step, log() takes the one after the last logged") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("steps", {}, {.log_dir = logs.path(), .run_name = "r"});
  accelerator.log({{"a", 1}});
  accelerator.log({{"a", 2}});
  accelerator.log({{"a", 3}}, 100);
  accelerator.log({{"a", 4}});
  accelerator.end_training();
  std::vector<std::string> steps;
  for (const auto& line : read_lines(logs.path() / "steps" / "r" / "metrics.csv"))
    steps.push_back(split(line)[0]);
  CHECK(steps == std::vector<std::string>{"step", "0", "1", "100", "101"});
}

TEST_CASE("each run gets a folder of its own: a name taken gets -2, the default is the UTC time") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .run_name = "same"});
  accelerator.end_training();
  accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .run_name = "same"});
  CHECK(internals(accelerator).tracker().run_dir() == logs.path() / "p" / "same-2");
  accelerator.end_training();
  accelerator.init_trackers("q", {}, {.log_dir = logs.path()});
  const std::string name = internals(accelerator).tracker().run_dir().filename();
  CHECK(std::regex_match(name, std::regex(R"(20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}-[0-9]{2}-[0-9]{2})")));
  accelerator.end_training();
}

TEST_CASE("ACCEL_LOG_DIR is the log folder when the options name none") {
  TemporaryFolder logs;
  accel_test::ScopedEnv env("ACCEL_LOG_DIR", logs.path().c_str());
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("from_env", {}, {.run_name = "r"});
  CHECK(fs::is_directory(logs.path() / "from_env" / "r"));
  accelerator.end_training();
}

TEST_CASE("only the backends asked for are written") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers(
      "p", {}, {.log_dir = logs.path(), .run_name = "r", .backends = {accel::tracking::Backend::csv}});
  accelerator.log({{"loss", 1}});
  accelerator.end_training();
  CHECK(fs::exists(logs.path() / "p" / "r" / "metrics.csv"));
  CHECK_FALSE(fs::exists(logs.path() / "p" / "r" / "metrics.jsonl"));
}

TEST_CASE("NaN and infinities: null in JSON lines, nan and inf in the CSV") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .run_name = "r"});
  accelerator.log({{"loss", std::nan("")}, {"norm", std::numeric_limits<double>::infinity()}}, 1);
  accelerator.end_training();
  CHECK(without_time(read_lines(logs.path() / "p" / "r" / "metrics.jsonl")[0]) ==
        R"({"step": 1, "time": T, "loss": null, "norm": null})");
  const auto row = split(read_lines(logs.path() / "p" / "r" / "metrics.csv")[1]);
  CHECK(row[2] == "nan");
  CHECK(row[3] == "inf");
}

TEST_CASE("a float (or float32 tensor) is written with a float's digits, a double with a double's") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .run_name = "r"});
  accelerator.log({{"tensor", torch::tensor(0.1F)},
                   {"float", 0.1F},
                   {"double", 0.1},
                   {"float64", torch::tensor(0.1, torch::kDouble)},
                   {"bf16", torch::tensor(1.5, torch::kBFloat16)},
                   {"int", std::int64_t{1} << 40}},
                  1);
  accelerator.end_training();
  CHECK(without_time(read_lines(logs.path() / "p" / "r" / "metrics.jsonl")[0]) ==
        R"({"step": 1, "time": T, "tensor": 0.1, "float": 0.1, "double": 0.1, "float64": 0.1, )"
        R"("bf16": 1.5, "int": 1099511627776})");
}

TEST_CASE("a process killed mid-run leaves every line it logged, and run.json says running") {
  TemporaryFolder logs;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Only the tracker here (no torch work after fork); killed without end_training().
    accel::tracking::Tracker tracker;
    tracker.start("crash", {}, {.log_dir = logs.path(), .run_name = "r"}, {.parallelism = "Ddp", .precision = "Fp32", .device = "cpu"}, true);
    for (int step = 1; step <= 5; ++step) tracker.log({{"loss", 1.0 / step}}, step);
    ::raise(SIGKILL);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  const fs::path run = logs.path() / "crash" / "r";
  CHECK(read_lines(run / "metrics.jsonl").size() == 5);
  CHECK(read_lines(run / "metrics.csv").size() == 6);
  CHECK(read_text(run / "run.json").find("\"status\": \"running\"") != std::string::npos);
}

TEST_CASE("misuse is an accel: error naming the value, and nothing is written for it") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  CHECK_THROWS_WITH_AS(accelerator.log({{"loss", 1}}),
                       "accel: log() without an open run: init_trackers() was not called; call "
                       "accelerator.init_trackers(\"project\", config) before logging",
                       accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.init_trackers("a/b", {}, {.log_dir = logs.path()}),
                       doctest::Contains("the project 'a/b' contains '/'"), accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.init_trackers("", {}, {.log_dir = logs.path()}),
                       doctest::Contains("the project '' is empty"), accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .run_name = ".."}),
                       doctest::Contains("the run_name '..' is not a folder name"), accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.init_trackers("p", {{"lr", 1}, {"lr", 2}}, {.log_dir = logs.path()}),
                       doctest::Contains("the config repeats the key 'lr'"), accel::Error);
  CHECK_THROWS_WITH_AS(
      accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .backends = {}}),
      doctest::Contains("TrackerOptions::backends is empty"), accel::Error);
  CHECK(fs::is_empty(logs.path()));  // refused before anything was made

  const fs::path file = logs.path() / "a-file";
  std::ofstream(file) << "not a folder";
  const std::string refused = "cannot create the log folder " + (file / "p").string();
  CHECK_THROWS_WITH_AS(accelerator.init_trackers("p", {}, {.log_dir = file}),
                       doctest::Contains(refused.c_str()), accel::Error);

  accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .run_name = "r"});
  CHECK_THROWS_WITH_AS(accelerator.init_trackers("other", {}, {.log_dir = logs.path()}),
                       doctest::Contains("while the run 'p/r' is still open; call end_training()"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.log({{"step", 1}}),
                       doctest::Contains("'step' is not a metric name of yours"), accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.log({{"loss", 1}, {"loss", 2}}),
                       doctest::Contains("the metric 'loss' appears twice"), accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.log({{"", 1}}), doctest::Contains("a metric has an empty name"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.log({{"loss", torch::ones({2, 3})}}),
                       doctest::Contains("metric 'loss' is a tensor of shape [2, 3] (6 elements)"),
                       accel::Error);
  accelerator.log({{"loss", 1}}, 7);  // the refused calls wrote nothing
  CHECK(read_lines(logs.path() / "p" / "r" / "metrics.jsonl").size() == 1);
  CHECK(read_lines(logs.path() / "p" / "r" / "metrics.csv").size() == 2);
  accelerator.end_training();
  accelerator.end_training();  // twice: nothing to do
  CHECK_THROWS_WITH_AS(accelerator.log({{"loss", 1}}),
                       doctest::Contains("without an open run: end_training() has ended it"),
                       accel::Error);
}

namespace {

// The run's one TensorBoard event file.
fs::path event_file(const fs::path& run) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(run))
    if (entry.path().filename().string().starts_with("events.out.tfevents."))
      found.push_back(entry.path());
  REQUIRE(found.size() == 1);
  return found.front();
}

// A file size limit stands in for a full disk: a write past `bytes` fails with EFBIG (SIGXFSZ
// ignored), for every file this process writes, until the scope ends.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(std::uintmax_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved_;
    small.rlim_cur = static_cast<rlim_t>(bytes);
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_)(int) = nullptr;
};

// Every row of metrics.csv has as many cells as its header; no step is in metrics.jsonl twice.
void check_consistent(const fs::path& run) {
  const auto csv = read_lines(run / "metrics.csv");
  REQUIRE_FALSE(csv.empty());
  const std::size_t width = split(csv[0]).size();
  for (const auto& line : csv) CHECK(split(line).size() == width);
  std::set<std::string> steps;
  for (const auto& line : read_lines(run / "metrics.jsonl")) {
    const std::string step = line.substr(0, line.find(','));
    CHECK_MESSAGE(steps.insert(step).second, step, " is logged twice");
  }
  CHECK_FALSE(fs::exists(run / "metrics.csv.widening"));
}

}  // namespace

TEST_CASE("a full disk: a log() call is written to every file whole, or to none") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp, accel::Fp32> accelerator;
  using accel::tracking::Backend;
  accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .run_name = "r",
                                      .backends = {Backend::csv, Backend::tensorboard,
                                                   Backend::jsonl}});
  const fs::path run = logs.path() / "p" / "r";
  const fs::path events = event_file(run);
  // Many columns logged once, then one metric per row: metrics.csv (a comma per column per row)
  // grows bigger than metrics.jsonl, so a limit can fit the JSONL line and not the CSV's write.
  accel::tracking::Metrics many;
  for (int i = 0; i < 100; ++i) many.emplace_back(fmt::format("m{}", i), i);
  accelerator.log(many, 0);
  for (int step = 1; step <= 100; ++step) accelerator.log({{"m0", step}}, step);
  const std::string csv_before = read_text(run / "metrics.csv");
  const std::string jsonl_before = read_text(run / "metrics.jsonl");
  const std::string events_before = read_text(events);
  REQUIRE(csv_before.size() > jsonl_before.size() + 200);
  REQUIRE(csv_before.size() > events_before.size() + 200);
  int calls_written = 101;  // a refused call is not counted in run.json's steps_logged

  SUBCASE("a new metric whose widening of the CSV fails") {
    {
      FileSizeLimit limit(csv_before.size() + 20);
      CHECK_THROWS_WITH_AS(accelerator.log({{"m0", 1}, {"new", 2}}, 101),
                           doctest::Contains("cannot rewrite"), accel::Error);
    }
    CHECK(read_text(run / "metrics.csv") == csv_before);
    CHECK(read_text(run / "metrics.jsonl") == jsonl_before);
    CHECK(read_text(events) == events_before);
    accelerator.log({{"m0", 1}, {"new", 2}}, 101);  // the same call, with room again
    ++calls_written;
    check_consistent(run);
    CHECK(read_text(events).size() > events_before.size());
    CHECK(split(read_lines(run / "metrics.csv").back()).back() == "2");
  }
  SUBCASE("a row that fits part way into the CSV") {
    {
      FileSizeLimit limit(csv_before.size() + 20);
      CHECK_THROWS_WITH_AS(accelerator.log({{"m0", 1}}, 101),
                           doctest::Contains("Nothing of this line was kept"), accel::Error);
    }
    CHECK(read_text(run / "metrics.csv") == csv_before);
    CHECK(read_text(run / "metrics.jsonl") == jsonl_before);
    CHECK(read_text(events) == events_before);
    accelerator.log({{"m0", 1}});  // no step given: still the refused call's, 101
    ++calls_written;
    check_consistent(run);
    CHECK(read_lines(run / "metrics.csv").back().rfind("101,", 0) == 0);
  }
  SUBCASE("a JSONL line that fits part way") {
    {
      FileSizeLimit limit(jsonl_before.size() + 5);
      CHECK_THROWS_WITH_AS(accelerator.log({{"m0", 1}}, 101),
                           doctest::Contains("Nothing of this line was kept"), accel::Error);
    }
    CHECK(read_text(run / "metrics.csv") == csv_before);
    CHECK(read_text(run / "metrics.jsonl") == jsonl_before);
    CHECK(read_text(events) == events_before);
  }
  accelerator.end_training();
  CHECK(read_text(run / "run.json").find(fmt::format("\"steps_logged\": {}", calls_written)) !=
        std::string::npos);
}

namespace {

// A tracker of the test's own, recording each call it gets as one line.
struct RecordingTracker {
  std::string label = "recorder";
  std::vector<std::string> calls;
  std::optional<accel::tracking::RunStart> started;
  std::vector<double> seconds;

  std::string name() const { return label; }
  void start(const accel::tracking::RunStart& run) {
    started = run;
    calls.push_back(fmt::format("start {}/{}", run.project, run.run_name));
  }
  void log(const accel::tracking::Scalars& values, std::int64_t step, double at) {
    std::string line = fmt::format("log {}", step);
    for (const auto& [name, value] : values) line += fmt::format(" {}={}", name, value.value);
    calls.push_back(line);
    seconds.push_back(at);
  }
  void log_text(const accel::tracking::Texts& values, std::int64_t step, double at) {
    std::string line = fmt::format("text {}", step);
    for (const auto& [name, text] : values) line += fmt::format(" {}={}", name, text);
    calls.push_back(line);
    seconds.push_back(at);
  }
  void finish() { calls.push_back("finish"); }
};

// One that throws from the call named `fails_in`.
struct FailingTracker {
  std::string fails_in;
  std::string name() const { return "flaky"; }
  void start(const accel::tracking::RunStart& /*run*/) { fail_if("start"); }
  void log(const accel::tracking::Scalars& /*values*/, std::int64_t /*step*/, double /*at*/) {
    fail_if("log");
  }
  void log_text(const accel::tracking::Texts& /*values*/, std::int64_t /*step*/, double /*at*/) {
    fail_if("log_text");
  }
  void finish() { fail_if("finish"); }
  void fail_if(const std::string& call) const {
    if (call == fails_in) throw std::runtime_error("quota exceeded");
  }
};

// The "time" of a JSON line.
std::string time_of(const std::string& line) {
  std::smatch match;
  REQUIRE(std::regex_search(line, match, std::regex("\"time\": ([^,}]+)")));
  return match[1];
}

}  // namespace

TEST_CASE("a tracker of yours gets the config, every metric and text, and finish, beside JSONL") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  auto mine = std::make_shared<RecordingTracker>();
  accelerator.init_trackers("mine", {{"lr", 0.1}, {"strategy", "ddp"}},
                            {.log_dir = logs.path(),
                             .run_name = "r",
                             .backends = {accel::tracking::Backend::jsonl},
                             .trackers = {accel::tracking::make_tracker(mine)}});
  const fs::path run = logs.path() / "mine" / "r";
  REQUIRE(mine->started);
  CHECK(mine->started->run_dir == run);
  CHECK(mine->started->main_process);
  CHECK(mine->started->description.parallelism == "Ddp");
  REQUIRE(mine->started->config.size() == 2);
  CHECK(mine->started->config[0].first == "lr");
  CHECK(mine->started->config[1].second.to_json() == "\"ddp\"");

  accelerator.log({{"loss", 0.5}, {"lr", 0.1}}, 1);
  accelerator.log_text({{"sample", "a \"quoted\" line"}}, 2);
  accelerator.log({{"loss", 0.25}});
  accelerator.end_training();

  CHECK(mine->calls == std::vector<std::string>{"start mine/r", "log 1 loss=0.5 lr=0.1",
                                                "text 2 sample=a \"quoted\" line",
                                                "log 3 loss=0.25", "finish"});
  const auto jsonl = read_lines(run / "metrics.jsonl");
  REQUIRE(jsonl.size() == 3);
  CHECK(without_time(jsonl[1]) == R"({"step": 2, "time": T, "sample": "a \"quoted\" line"})");
  // One call, one time: every tracker is given the same seconds.
  for (std::size_t i = 0; i < jsonl.size(); ++i)
    CHECK(time_of(jsonl[i]) == accel::tracking::json::number(mine->seconds[i]));
  CHECK_FALSE(fs::exists(run / "metrics.csv"));
  CHECK(read_text(run / "run.json").find("\"steps_logged\": 2") != std::string::npos);
}

TEST_CASE("trackers are called on the main process only, unless one asks for every process") {
  TemporaryFolder logs;
  for (const bool main_process : {true, false}) {
    CAPTURE(main_process);
    auto main_only = std::make_shared<RecordingTracker>();
    auto everywhere = std::make_shared<RecordingTracker>();
    accel::tracking::Tracker tracker;  // `writes` = false stands for a process other than rank 0
    tracker.start("p", {{"lr", 1}},
                  {.log_dir = logs.path(),
                   .run_name = main_process ? "main" : "other",
                   .trackers = {accel::tracking::make_tracker(main_only),
                                accel::tracking::make_tracker(
                                    everywhere, {.main_process_only = false})}},
                  {.parallelism = "Ddp", .precision = "Fp32", .device = "cpu"}, main_process);
    tracker.log({{"loss", 1}}, 0);
    tracker.log_text({{"note", "hi"}}, 0);
    tracker.finish();
    const std::string run = main_process ? "main" : "other";
    const std::vector<std::string> all{"start p/" + run, "log 0 loss=1", "text 0 note=hi",
                                       "finish"};
    CHECK(everywhere->calls == all);
    CHECK(everywhere->started->main_process == main_process);
    CHECK(everywhere->started->run_dir.empty() == !main_process);
    CHECK(main_only->calls == (main_process ? all : std::vector<std::string>{}));
  }
  // Only the main process made a folder.
  CHECK(fs::exists(logs.path() / "p" / "main" / "metrics.jsonl"));
  CHECK_FALSE(fs::exists(logs.path() / "p" / "other"));
}

TEST_CASE("a tracker that throws: the error names the tracker and the call") {
  TemporaryFolder logs;
  const auto flaky = [](std::string call, accel::tracking::TrackerSettings settings = {}) {
    return accel::tracking::make_tracker(FailingTracker{std::move(call)}, settings);
  };
  accel::Accelerator<accel::Ddp> accelerator;

  SUBCASE("in log(), after the files took the call: it counts, the others still get it") {
    auto after = std::make_shared<RecordingTracker>();
    accelerator.init_trackers(
        "p", {},
        {.log_dir = logs.path(),
         .run_name = "r",
         .trackers = {flaky("log"), accel::tracking::make_tracker(after)}});
    CHECK_THROWS_WITH_AS(
        accelerator.log({{"loss", 1}}, 3),
        "accel: log() at step 3: the tracker 'flaky' failed: quota exceeded; the trackers "
        "before it kept this call, so it counts as made: do not make it again",
        accel::Error);
    CHECK(after->calls.back() == "log 3 loss=1");
    CHECK(read_lines(logs.path() / "p" / "r" / "metrics.jsonl").size() == 1);
    CHECK_THROWS_WITH_AS(accelerator.log({{"loss", 2}}),
                         doctest::Contains("log() at step 4: the tracker 'flaky'"),
                         accel::Error);
    accelerator.end_training();
  }
  SUBCASE("in log(), first: the call is refused, the next tracker never gets it") {
    auto after = std::make_shared<RecordingTracker>();
    accelerator.init_trackers("p", {},
                              {.log_dir = logs.path(),
                               .run_name = "r",
                               .backends = {},
                               .trackers = {flaky("log"), accel::tracking::make_tracker(after)}});
    CHECK_THROWS_WITH_AS(accelerator.log({{"loss", 1}}),
                         "accel: log() at step 0: the tracker 'flaky' failed: quota exceeded",
                         accel::Error);
    CHECK(after->calls == std::vector<std::string>{"start p/r"});
    accelerator.end_training();
  }
  SUBCASE("in start(): no run is open, and the trackers started before it are finished") {
    auto before = std::make_shared<RecordingTracker>();
    CHECK_THROWS_WITH_AS(
        accelerator.init_trackers(
            "p", {},
            {.log_dir = logs.path(),
             .trackers = {accel::tracking::make_tracker(before), flaky("start")}}),
        "accel: init_trackers(\"p\"): the tracker 'flaky' failed in start(): quota exceeded",
        accel::Error);
    CHECK(before->calls.back() == "finish");
    CHECK_FALSE(internals(accelerator).tracker().is_open());
    CHECK_THROWS_WITH_AS(accelerator.log({{"loss", 1}}),
                         doctest::Contains("init_trackers() was not called"), accel::Error);
  }
  SUBCASE("in finish(): every other tracker finishes, and the run is ended") {
    auto after = std::make_shared<RecordingTracker>();
    accelerator.init_trackers(
        "p", {},
        {.log_dir = logs.path(),
         .run_name = "r",
         .trackers = {flaky("finish"), accel::tracking::make_tracker(after)}});
    CHECK_THROWS_WITH_AS(accelerator.end_training(),
                         "accel: end_training(): the tracker 'flaky' failed in finish(): quota "
                         "exceeded; the run is ended for every tracker",
                         accel::Error);
    CHECK(after->calls.back() == "finish");
    CHECK_FALSE(internals(accelerator).tracker().is_open());
    CHECK(read_text(logs.path() / "p" / "r" / "run.json").find("\"status\": \"finished\"") !=
          std::string::npos);
  }
}

TEST_CASE("log_text: metrics.jsonl only, checked like log()'s names") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  CHECK_THROWS_WITH_AS(accelerator.log_text({{"note", "x"}}),
                       doctest::Contains("log_text() without an open run"), accel::Error);
  accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .run_name = "r"});
  CHECK_THROWS_WITH_AS(accelerator.log_text({{"step", "x"}}),
                       doctest::Contains("'step' is not a text name of yours"), accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.log_text({{"a", "x"}, {"a", "y"}}),
                       doctest::Contains("the text 'a' appears twice"), accel::Error);
  accelerator.log({{"loss", 1}}, 0);
  accelerator.log_text({{"note", "line\none"}});
  accelerator.end_training();
  const fs::path run = logs.path() / "p" / "r";
  const auto jsonl = read_lines(run / "metrics.jsonl");
  REQUIRE(jsonl.size() == 2);
  CHECK(without_time(jsonl[1]) == R"({"step": 1, "time": T, "note": "line\none"})");
  CHECK(read_lines(run / "metrics.csv").size() == 2);  // the header and the one metric row
}

TEST_CASE("TensorBoard's event file: named as TensorBoard names it, written as logged, whole "
          "records only on a full disk") {
  CHECK(accel::tracking::crc32c("123456789") == 0xE3069283U);  // CRC-32C's check value
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("p", {{"lr", 0.5}},
                            {.log_dir = logs.path(), .run_name = "r",
                             .backends = {accel::tracking::Backend::tensorboard}});
  const fs::path run = logs.path() / "p" / "r";
  const fs::path events = event_file(run);
  CHECK(std::regex_match(events.filename().string(),
                         std::regex(R"(events\.out\.tfevents\.[0-9]{10}\.)" +
                                    accel::tracking::host_name())));
  CHECK_FALSE(fs::exists(run / "metrics.jsonl"));
  CHECK_FALSE(fs::exists(run / "metrics.csv"));
  const std::string started = read_text(events);
  REQUIRE(started.size() > 24);  // the version record and the config's
  accelerator.log({{"loss", 0.5}}, 1);
  const std::string logged = read_text(events);  // on disk before end_training()
  CHECK(logged.size() > started.size());
  CHECK(logged.starts_with(started));

  {
    FileSizeLimit limit(logged.size() + 10);
    CHECK_THROWS_WITH_AS(accelerator.log({{"a_long_metric_name", 1.0}}, 2),
                         doctest::Contains("Nothing of this record was kept"), accel::Error);
  }
  CHECK(read_text(events) == logged);
  accelerator.log({{"a_long_metric_name", 1.0}});  // the same call (step 2), with room again
  const std::string retried = read_text(events);
  accelerator.end_training();
  CHECK(read_text(events) == retried);
  // The record of step 2: framing (8 + 4 + 4 bytes) around an Event that holds the tag.
  CHECK(retried.size() > logged.size() + 16 + std::string("a_long_metric_name").size());
  CHECK(retried.find("a_long_metric_name", logged.size()) != std::string::npos);
  CHECK(read_text(run / "run.json").find("\"steps_logged\": 2") != std::string::npos);
}

}  // namespace tracking_tracking
