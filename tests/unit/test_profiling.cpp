// Profiling (docs/how-to/profiling.md): the schedule's decisions, the Chrome trace's structure (valid
// JSON, the rank as the process, spans nested and ordered), a profiled loop on one process
// keeping exactly the scheduled steps, libtorch's operator events beside accel's spans, the
// step timeline reaching a tracker with phases that add up to the step, and the errors.
#include <accel/accelerator.hpp>
#include <accel/profiling/trace_file.hpp>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "helpers.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_profiling {

namespace {

namespace fs = std::filesystem;
using accel::profiling::ScheduleAction;

struct TemporaryFolder {
  fs::path path;
  TemporaryFolder() {
    std::string name = (fs::temp_directory_path() / "accel-profile-XXXXXX").string();
    REQUIRE(::mkdtemp(name.data()) != nullptr);
    path = name;
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

std::string tracking_read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);  // throws on anything but valid JSON
}

// The "X" events of a trace, in file order.
std::vector<nlohmann::json> spans_of(const nlohmann::json& trace) {
  std::vector<nlohmann::json> spans;
  for (const auto& event : trace.at("traceEvents"))
    if (event.at("ph") == "X") spans.push_back(event);
  return spans;
}

// Every thread's spans come sorted by start, and each one lies inside the span still open
// before it or after its end: properly nested, as a viewer stacks them.
void check_nested_and_ordered(const nlohmann::json& trace) {
  std::map<std::int64_t, std::vector<double>> open_ends;  // per thread: ends of open spans
  std::map<std::int64_t, double> last_start;
  for (const auto& span : spans_of(trace)) {
    const std::int64_t thread = span.at("tid");
    const double start = span.at("ts"), end = start + span.at("dur").get<double>();
    if (last_start.count(thread)) CHECK(start >= last_start[thread]);
    last_start[thread] = start;
    auto& stack = open_ends[thread];
    // Printed with nanosecond decimals: a sum of two of them may round past the next start.
    while (!stack.empty() && start >= stack.back() - 1e-3) stack.pop_back();
    if (!stack.empty()) CHECK_MESSAGE(end <= stack.back() + 1e-3, span.dump());
    stack.push_back(end);
  }
}

// A small loop on a prepared loader: `steps` optimizer steps of batches of 4.
template <class Accel>
void train(Accel& accelerator, int steps) {
  accel::DataLoader loader(accel_test::Regression(4 * steps), {.batch_size = 4});
  auto net = accel_test::seeded_mlp();
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer, batches] = accelerator.prepare(net, sgd, loader);
  for (const auto& batch : batches) {
    const auto loss = torch::mse_loss(model(batch.x), batch.y);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
  }
}

// The tracker of the timeline test: each log() call's numbers by name.
struct Rows {
  std::vector<std::int64_t> steps;
  std::vector<std::map<std::string, double>> values;
};
struct RowTracker {
  std::shared_ptr<Rows> rows = std::make_shared<Rows>();
  std::string name() const { return "rows"; }
  void start(const accel::tracking::RunStart& /*run*/) {}
  void log(const accel::tracking::Scalars& values, std::int64_t step, double /*at*/) {
    rows->steps.push_back(step);
    auto& row = rows->values.emplace_back();
    for (const auto& [name, number] : values) row[name] = number.value;
  }
  void log_text(const accel::tracking::Texts& /*values*/, std::int64_t /*step*/, double) {}
  void finish() {}
};

}  // namespace

TEST_CASE("profile schedule, wait, warmup, active and repeat as torch.profiler.schedule") {
  const accel::ProfileSchedule schedule{.wait = 1, .warmup = 1, .active = 2, .repeat = 2,
                                        .skip_first = 1};
  const std::vector<ScheduleAction> expected = {
      ScheduleAction::none,                                            // skip_first
      ScheduleAction::none,   ScheduleAction::warmup,                  // cycle 1
      ScheduleAction::record, ScheduleAction::record_and_save,
      ScheduleAction::none,   ScheduleAction::warmup,                  // cycle 2
      ScheduleAction::record, ScheduleAction::record_and_save,
      ScheduleAction::none,   ScheduleAction::none, ScheduleAction::none};  // repeat = 2: done
  for (std::size_t step = 0; step < expected.size(); ++step)
    CHECK_MESSAGE(accel::profiling::schedule_action(schedule, static_cast<std::int64_t>(step)) ==
                      expected[step],
                  "step " << step);
  // repeat = 0: cycles for as long as the profile lasts.
  const accel::ProfileSchedule forever{.wait = 0, .warmup = 0, .active = 1};
  CHECK(accel::profiling::schedule_action(forever, 1000) == ScheduleAction::record_and_save);

  CHECK_THROWS_WITH(accel::profiling::check_schedule({.wait = -1}),
                    doctest::Contains("ProfileSchedule::wait is -1"));
  CHECK_THROWS_WITH(accel::profiling::check_schedule({.active = 0}),
                    doctest::Contains("ProfileSchedule::active is 0"));
}

TEST_CASE("chrome trace, valid JSON with the rank as process and nested spans in order") {
  using accel::profiling::Part;
  using accel::profiling::SpanRecord;
  // A step holding forward, then backward with an all-reduce issued and waited for inside it;
  // a second thread's span; given out of order, as threads finish them.
  const std::vector<SpanRecord> spans = {
      {"allreduce", "communication", 1500, 1600, 12, 4096, 1, Part::wait},
      {"forward", "forward", 200, 900, -1, 0, 1, Part::whole},
      {"step", "step", 100, 2000, 3, 0, 1, Part::whole},
      {"allreduce", "communication", 1100, 1150, 12, 4096, 1, Part::issue},
      {"backward", "backward", 1000, 1700, -1, 0, 1, Part::whole},
      {"allreduce", "communication", 1200, 1300, 13, 64, 7, Part::whole}};
  const std::vector<accel::profiling::OpRecord> ops = {{"aten::mm", 6300, 6400, 1}};
  // Spans on the steady clock + 5000 ns = the system clock; time zero at 5000.
  const std::string text = accel::profiling::chrome_trace(3, spans, ops, 5000, 5000, 1);
  const nlohmann::json trace = nlohmann::json::parse(text);
  REQUIRE(trace.at("traceEvents").is_array());
  CHECK(trace.at("otherData").at("base_time_ns") == 5000);

  bool named = false;
  for (const auto& event : trace.at("traceEvents")) {
    CHECK(event.at("pid") == 3);
    if (event.at("ph") == "M" && event.at("name") == "process_name") {
      CHECK(event.at("args").at("name") == "rank 3");
      named = true;
    }
  }
  CHECK(named);
  const auto x = spans_of(trace);
  REQUIRE(x.size() == 7);
  std::vector<std::string> names;
  for (const auto& span : x) names.push_back(span.at("name"));
  // Thread 1 by start, the parent before its children; thread 7 after it.
  CHECK(names == std::vector<std::string>{"step 3", "forward", "backward",
                                          "allreduce #12 (issue)", "aten::mm",
                                          "allreduce #12 (wait)", "allreduce #13"});
  CHECK(x[0].at("ts").get<double>() == doctest::Approx(0.1));
  CHECK(x[0].at("dur").get<double>() == doctest::Approx(1.9));
  CHECK(x[0].at("cat") == "step");
  CHECK(x[3].at("args").at("bytes") == 4096);
  CHECK(x[4].at("cat") == "torch");
  check_nested_and_ordered(trace);
}

TEST_CASE("profile on one process keeps the scheduled steps with their spans nested") {
  TemporaryFolder folder;
  accel::Accelerator<accel::Ddp> accelerator;
  CHECK(accel::profiling::detail::active_recorder.load() == nullptr);
  fs::path file;
  {
    auto profile = accelerator.profile(
        {.schedule = accel::ProfileSchedule{.wait = 1, .warmup = 1, .active = 2, .repeat = 1},
         .output_dir = folder.path});
    file = profile.file();
    CHECK(file == folder.path / "trace_rank0.json");
    train(accelerator, 6);
  }
  // Off again once the scope ends: spans cost a load and a branch.
  CHECK(accel::profiling::detail::active_recorder.load() == nullptr);
  const nlohmann::json trace = read_json(file);
  check_nested_and_ordered(trace);
  std::vector<std::string> steps;
  std::map<std::string, int> names;
  for (const auto& span : spans_of(trace)) {
    if (span.at("cat") == "step") steps.push_back(span.at("name"));
    ++names[span.at("name").get<std::string>()];
  }
  // Steps 1 (wait) and 2 (warm-up) are left out; 3 and 4 recorded; 5 and 6 after the cycle.
  CHECK(steps == std::vector<std::string>{"step 3", "step 4"});
  CHECK(names["forward"] == 2);
  CHECK(names["backward"] == 2);
  CHECK(names["optimizer step"] == 2);
  CHECK(names["data"] >= 2);
  CHECK(names.count("aten::mm") == 0);  // torch_ops off
}

TEST_CASE("profile with torch_ops adds libtorch's operators to the same trace") {
  TemporaryFolder folder;
  accel::Accelerator<accel::Ddp> accelerator;
  fs::path file;
  {
    auto profile = accelerator.profile({.output_dir = folder.path, .torch_ops = true});
    file = profile.file();
    train(accelerator, 2);
  }
  int ops = 0, forwards = 0;
  for (const auto& span : spans_of(read_json(file))) {
    ops += span.at("cat") == "torch";
    forwards += span.at("name") == "forward";
  }
  CHECK(ops > 10);
  CHECK(forwards == 2);
}

TEST_CASE("profile errors, a second profile and a bad schedule") {
  TemporaryFolder folder;
  accel::Accelerator<accel::Ddp> accelerator;
  auto profile = accelerator.profile({.output_dir = folder.path});
  CHECK_THROWS_WITH((void)accelerator.profile({.output_dir = folder.path}),
                    doctest::Contains("a profile of this Accelerator is already open"));
  profile.close();
  CHECK(fs::exists(folder.path / "trace_rank0.json"));
  CHECK_THROWS_WITH((void)accelerator.profile({.schedule = accel::ProfileSchedule{.active = 0},
                                               .output_dir = folder.path}),
                    doctest::Contains("ProfileSchedule::active is 0"));
  CHECK_THROWS_WITH(accel::Accelerator<accel::Ddp>({.timeline = {.enabled = true, .every = 0}}),
                    doctest::Contains("Options::timeline.every is 0"));
}

TEST_CASE("timeline, each step's phases reach the trackers and add up to the step") {
  TemporaryFolder folder;
  accel::Accelerator<accel::Ddp> accelerator(
      {.timeline = {.enabled = true, .samples_per_step = 4, .tokens_per_step = 40,
                    .flops_per_sample = 1e6, .peak_flops = 1e12}});
  RowTracker mine;
  accelerator.init_trackers("timeline", {},
                            {.log_dir = folder.path,
                             .run_name = "r",
                             .backends = {accel::tracking::Backend::csv},
                             .trackers = {accel::tracking::make_tracker(mine)}});
  train(accelerator, 4);
  accelerator.end_training();
  // Steps 1 to 3 logged during the loop, the last one by end_training().
  CHECK(mine.rows->steps == std::vector<std::int64_t>{1, 2, 3, 4});
  for (const auto& row : mine.rows->values) {
    double phases = 0;
    for (const char* phase : {"data", "forward", "backward", "communication", "optimizer", "idle"}) {
      const std::string name = std::string("timeline/rank0/") + phase;
      REQUIRE_MESSAGE(row.count(name) == 1, name);
      CHECK(row.at(name) >= 0);
      phases += row.at(name);
    }
    const double step = row.at("timeline/rank0/step");
    CHECK(step > 0);
    CHECK(phases == doctest::Approx(step).epsilon(1e-6));
    CHECK(row.at("timeline/rank0/forward") > 0);
    CHECK(row.at("timeline/rank0/backward") > 0);
    CHECK(row.at("timeline/rank0/communication") == 0);  // one process
    CHECK(row.at("timeline/step_seconds") == step);
    CHECK(row.at("timeline/samples_per_second") == doctest::Approx(4 / step));
    CHECK(row.at("timeline/tokens_per_second") == doctest::Approx(40 / step));
    CHECK(row.at("timeline/mfu") == doctest::Approx(4e6 / step / 1e12));
  }
  // The CSV has the columns too, for accel-plot.
  std::ifstream csv(folder.path / "timeline" / "r" / "metrics.csv");
  std::string header;
  std::getline(csv, header);
  CHECK(header.find("timeline/rank0/backward") != std::string::npos);
}

// The file's bytes before its closing "]" and trailer: the events written so far.
std::string events_part(const std::string& text) {
  const std::size_t end = text.rfind("\n],\n");
  REQUIRE(end != std::string::npos);
  return text.substr(0, end);
}

TEST_CASE("profile without a repeat limit appends each cycle: the file is valid after every step "
          "and never written whole again") {
  TemporaryFolder folder;
  accel::Accelerator<accel::Ddp> accelerator;
  constexpr int steps = 40;
  accel::DataLoader loader(accel_test::Regression(4 * steps), {.batch_size = 4});
  auto net = accel_test::seeded_mlp();
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer, batches] = accelerator.prepare(net, sgd, loader);
  // One recorded step per cycle, cycles without end: a save at every step.
  auto profile = accelerator.profile(
      {.schedule = accel::ProfileSchedule{.active = 1, .repeat = 0}, .output_dir = folder.path});
  accel::profiling::Recorder* recorder = accel::profiling::detail::claimed_recorder.load();
  REQUIRE(recorder != nullptr);
  std::string before;
  ino_t inode = 0;
  int saved = 0;
  for (const auto& batch : batches) {
    const auto loss = torch::mse_loss(model(batch.x), batch.y);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (!fs::exists(profile.file())) continue;  // the first step closes at the next one's data
    struct stat file {};
    REQUIRE(::stat(profile.file().c_str(), &file) == 0);
    const std::string text = tracking_read(profile.file());
    const nlohmann::json trace = nlohmann::json::parse(text);  // whole after every save
    int step_spans = 0;
    for (const auto& span : spans_of(trace)) step_spans += span.at("cat") == "step";
    if (before.empty()) inode = file.st_ino;
    // The same file, grown at its end: what was written stays, byte for byte.
    CHECK(file.st_ino == inode);
    CHECK(events_part(text).rfind(before, 0) == 0);
    CHECK(step_spans >= saved);
    saved = step_spans;
    before = events_part(text);
  }
  profile.close();
  const std::string text = tracking_read(profile.file());
  const nlohmann::json trace = nlohmann::json::parse(text);
  check_nested_and_ordered(trace);
  int step_spans = 0;
  for (const auto& span : spans_of(trace)) step_spans += span.at("cat") == "step";
  CHECK(step_spans == steps);
  // Every byte of the file written once, plus the closing bytes again at each later save: the
  // cost of a save does not grow with the file.
  const accel::profiling::TraceWrites writes = recorder->trace_writes();
  const auto tail = static_cast<std::int64_t>(text.size() - events_part(text).size());
  CHECK(writes.whole == 1);
  CHECK(writes.saves == steps);
  CHECK(writes.bytes == static_cast<std::int64_t>(text.size()) + (writes.saves - 1) * tail);
  CHECK(recorder->events().empty());  // saved spans are let go
}

TEST_CASE("a profile that outlives its Accelerator: the Accelerator ends it, then it is inert") {
  TemporaryFolder folder;
  std::optional<accel::profiling::Profile> kept, dropped;
  {
    auto accelerator = std::make_unique<accel::Accelerator<accel::Ddp>>();
    kept.emplace(accelerator->profile({.output_dir = folder.path / "kept"}));
    train(*accelerator, 2);
    accelerator.reset();  // writes the trace, as the end of the profile's scope would
  }
  CHECK(accel::profiling::detail::active_recorder.load() == nullptr);
  CHECK(accel::profiling::detail::claimed_recorder.load() == nullptr);
  const fs::path file = kept->file();
  int step_spans = 0;
  for (const auto& span : spans_of(read_json(file))) step_spans += span.at("cat") == "step";
  CHECK(step_spans == 2);
  const auto written = fs::last_write_time(file);
  kept->close();  // nothing left to do: the Accelerator is gone
  kept.reset();
  CHECK(fs::last_write_time(file) == written);
  {
    auto accelerator = std::make_unique<accel::Accelerator<accel::Ddp>>();
    dropped.emplace(accelerator->profile({.output_dir = folder.path / "dropped"}));
  }
  dropped.reset();  // destroyed without close(), after its Accelerator
  CHECK(fs::exists(folder.path / "dropped" / "trace_rank0.json"));
  // Profiling is free for the next Accelerator.
  accel::Accelerator<accel::Ddp> next;
  auto again = next.profile({.output_dir = folder.path / "next"});
  again.close();
  CHECK(fs::exists(folder.path / "next" / "trace_rank0.json"));
}

}  // namespace unit_profiling
