// Everyday-use scenarios across processes: run tracking writes from the main process only, while
// every rank checks its arguments the same way; progress shows on the main process only.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "scenario.hpp"

namespace fs = std::filesystem;

namespace {

std::size_t line_count(const fs::path& path) {
  std::ifstream in(path);
  std::size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

void tracking_main_only() {
  accel::Accelerator<accel::Ddp> accelerator(accel_test::test_options());
  const int world = accelerator.num_processes();
  // One folder for the whole group: rank 0 makes it, the others learn its name.
  std::string made;
  if (accelerator.is_main_process()) {
    const char* base = std::getenv("TMPDIR");
    made = std::string(base && *base ? base : "/tmp") + "/accel-dist-tracking-XXXXXX";
    EXPECT(::mkdtemp(made.data()) != nullptr);
  }
  const fs::path logs = accelerator.gather_object(made)[0];

  accelerator.init_trackers("dist", {{"processes", world}}, {.log_dir = logs, .run_name = "r"});
  for (int step = 1; step <= 3; ++step) {
    const torch::Tensor mine = torch::tensor(static_cast<double>(accelerator.process_index() + step));
    accelerator.log({{"mean", accelerator.reduce(mine, accel::ReduceOp::mean)}}, step);
  }
  // A misuse fails on every rank, not only on the one that writes.
  bool refused = false;
  try {
    accelerator.log({{"step", 1}});
  } catch (const accel::Error&) {
    refused = true;
  }
  EXPECT(refused);
  accel::Progress progress(accelerator, 3, {.mode = accel::ProgressMode::lines});
  EXPECT((progress.mode() == accel::ProgressMode::off) == !accelerator.is_main_process());
  accelerator.end_training();
  accelerator.wait_for_everyone();

  if (accelerator.is_main_process()) {
    const fs::path run = logs / "dist" / "r";
    EXPECT(accelerator.tracker().run_dir() == run);
    std::size_t runs = 0;
    for (const auto& entry : fs::directory_iterator(logs / "dist")) runs += entry.is_directory();
    EXPECT(runs == 1);  // no other rank made a folder of its own
    EXPECT(line_count(run / "metrics.jsonl") == 3);
    EXPECT(line_count(run / "metrics.csv") == 4);
    std::ifstream in(run / "run.json");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT(text.find(fmt::format("\"processes\": {}", world)) != std::string::npos);
    EXPECT(text.find("\"status\": \"finished\"") != std::string::npos);
    // Rank r logged r + step; the mean over the ranks at step 3 is 3 + (world - 1) / 2.
    std::ifstream csv(run / "metrics.csv");
    std::string last;
    for (std::string line; std::getline(csv, line);) last = line;
    const double expected = 3.0 + (world - 1) / 2.0;
    EXPECT(last.substr(last.rfind(',') + 1) == fmt::format("{}", expected));
  } else {
    EXPECT(accelerator.tracker().run_dir().empty());
  }
  accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) fs::remove_all(logs);
}

// gather_object of empty strings on every rank (the self-test's "no problem" answer): Gloo
// cannot all-gather an empty tensor (SIGFPE), so nothing empty may reach it.
void gather_empty_objects() {
  accel::Accelerator<accel::Ddp> accelerator(accel_test::test_options());
  const auto empty = accelerator.gather_object(std::string());
  EXPECT(empty.size() == static_cast<std::size_t>(accelerator.num_processes()));
  for (const auto& text : empty) EXPECT(text.empty());
  const auto some = accelerator.gather_object(
      accelerator.process_index() == 1 ? std::string("one") : std::string());
  EXPECT(some[0].empty() && some[1] == "one");
}

}  // namespace

int main(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"tracking_main_only", tracking_main_only},
      {"gather_empty_objects", gather_empty_objects},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}
