// Everyday-use scenarios across processes: run tracking writes from the main process only, while
// every rank checks its arguments the same way; progress shows on the main process only; a
// profile writes one trace per rank with its collectives, and the step timeline reaches the
// main process's trackers with every rank's phases.
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "scenario.hpp"

using accel::testing::internals;

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_everyday {

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
    EXPECT(internals(accelerator).tracker().run_dir() == run);
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
    EXPECT(internals(accelerator).tracker().run_dir().empty());
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

// Under accel-launch --max-restarts 1: on the first start rank 1 dies (SIGKILL) after two
// steps, in the middle of training while rank 0 waits in a collective; the launcher stops the
// group and starts it again with ACCEL_RESTART_COUNT=1, and that start trains to the end and
// matches one process on the global batch.
void restart_after_kill() {
  const char* count = std::getenv("ACCEL_RESTART_COUNT");
  const char* limit = std::getenv("ACCEL_MAX_RESTARTS");
  EXPECT(count != nullptr && limit != nullptr && std::string(limit) == "1");
  const bool first_start = std::string(count) == "0";
  accel::Accelerator<accel::Ddp> accelerator(accel_test::test_options());
  const std::int64_t world = accelerator.num_processes();
  const torch::Tensor inputs = torch::linspace(-1, 1, world * 4 * 5).reshape({-1, 1});
  const torch::Tensor targets = 3 * inputs + 1;
  torch::manual_seed(7);
  torch::nn::Linear net(1, 1);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  for (std::int64_t step = 0; step < 5; ++step) {
    if (first_start && step == 2 && accelerator.process_index() == 1) ::raise(SIGKILL);
    const auto rows = inputs.narrow(0, step * world * 4 + accelerator.process_index() * 4, 4);
    const auto wanted = targets.narrow(0, step * world * 4 + accelerator.process_index() * 4, 4);
    accelerator.backward(torch::mse_loss(model(rows), wanted));
    optimizer.step();
    optimizer.zero_grad();
  }
  EXPECT(!first_start);  // the first start never gets here: rank 1 died, rank 0 was stopped
  torch::manual_seed(7);
  torch::nn::Linear reference(1, 1);
  torch::optim::SGD reference_sgd(reference->parameters(), 0.1);
  for (std::int64_t step = 0; step < 5; ++step) {
    const auto rows = inputs.narrow(0, step * world * 4, world * 4);
    torch::mse_loss(reference(rows), targets.narrow(0, step * world * 4, world * 4)).backward();
    reference_sgd.step();
    reference_sgd.zero_grad();
  }
  EXPECT(torch::allclose(net->weight, reference->weight, 1e-5, 1e-6));
  EXPECT(torch::allclose(net->bias, reference->bias, 1e-5, 1e-6));
  fmt::print("rank {}: trained on start {} of at most 2\n", accelerator.process_index(),
             std::atoi(count) + 1);
}

// Two "nodes" (tests/everyday/two_nodes.sh: two network namespaces joined by a veth pair, one
// launcher each with --nnodes 2): one rank per node, Ddp steps that match one process.
void two_nodes_ddp() {
  accel::Accelerator<accel::Ddp> accelerator(accel_test::test_options());
  EXPECT(accelerator.num_processes() == 2);
  EXPECT(std::string(std::getenv("LOCAL_WORLD_SIZE")) == "1");
  EXPECT(std::string(std::getenv("GROUP_RANK")) == std::to_string(accelerator.process_index()));
  const std::int64_t rank = accelerator.process_index();
  // Large enough that the gradients' traffic shows on the link's counters.
  torch::manual_seed(11);
  const torch::Tensor data = torch::randn({2 * 8 * 4, 256});
  const torch::Tensor targets = data.sum(1, true);
  torch::manual_seed(static_cast<std::uint64_t>(5 + rank));  // prepare() broadcasts rank 0's
  torch::nn::Linear net(256, 256);
  torch::nn::Linear head(256, 1);
  torch::optim::SGD sgd(net->parameters(), 0.01);
  torch::optim::SGD head_sgd(head->parameters(), 0.01);
  auto [model, top, optimizer, top_optimizer] = accelerator.prepare(net, head, sgd, head_sgd);
  for (std::int64_t step = 0; step < 4; ++step) {
    const auto rows = data.narrow(0, step * 16 + rank * 8, 8);
    accelerator.backward(torch::mse_loss(top(torch::tanh(model(rows))),
                                         targets.narrow(0, step * 16 + rank * 8, 8)));
    optimizer.step();
    top_optimizer.step();
    optimizer.zero_grad();
    top_optimizer.zero_grad();
  }
  torch::manual_seed(5);
  torch::nn::Linear reference(256, 256);
  torch::nn::Linear reference_head(256, 1);
  torch::optim::SGD reference_sgd(reference->parameters(), 0.01);
  torch::optim::SGD reference_head_sgd(reference_head->parameters(), 0.01);
  for (std::int64_t step = 0; step < 4; ++step) {
    const auto rows = data.narrow(0, step * 16, 16);
    torch::mse_loss(reference_head(torch::tanh(reference(rows))), targets.narrow(0, step * 16, 16))
        .backward();
    reference_sgd.step();
    reference_head_sgd.step();
    reference_sgd.zero_grad();
    reference_head_sgd.zero_grad();
  }
  EXPECT(torch::allclose(net->weight, reference->weight, 1e-5, 1e-6));
  EXPECT(torch::allclose(head->weight, reference_head->weight, 1e-5, 1e-6));
}


// Random rows and targets, the same on every rank.
struct Row {
  torch::Tensor x;
  torch::Tensor y;
};
struct RandomRows {
  torch::Tensor x, y;
  RandomRows(std::int64_t n, std::int64_t features)
      : x(torch::randn({n, features})), y(torch::randn({n, 1})) {}
  std::int64_t size() const { return x.size(0); }
  Row get(std::int64_t i) const { return {x[i], y[i]}; }
};

// A folder for the whole group: rank 0 makes it, the others learn its name.
template <class Accel>
fs::path shared_folder(Accel& accelerator, const char* what) {
  std::string made;
  if (accelerator.is_main_process()) {
    const char* base = std::getenv("TMPDIR");
    made = std::string(base && *base ? base : "/tmp") + "/accel-dist-" + what + "-XXXXXX";
    EXPECT(::mkdtemp(made.data()) != nullptr);
  }
  return accelerator.gather_object(made)[0];
}

// A few steps of a two-layer Sequential (a Zero3 unit per layer) on 16 rows per rank.
template <class Accel>
void train_steps(Accel& accelerator, int steps) {
  torch::manual_seed(3);
  auto net = torch::nn::Sequential(torch::nn::Linear(32, 64), torch::nn::Tanh(),
                                   torch::nn::Linear(64, 1));
  torch::optim::SGD sgd(net->parameters(), 0.01);
  accel::DataLoader loader(RandomRows(16 * steps * accelerator.num_processes(), 32),
                           {.batch_size = 16});
  auto [model, optimizer, batches] = accelerator.prepare(net, sgd, loader);
  for (const auto& batch : batches) {
    accelerator.backward(torch::mse_loss(model(batch.x), batch.y));
    optimizer.step();
    optimizer.zero_grad();
  }
}

// Profiles steps 2 and 3 of 4 under `Accel` and checks every rank's trace: valid JSON, the rank
// as the process, the two steps, and the strategy's collectives inside them.
template <class Accel>
void profile_traces(const std::vector<std::string>& collectives) {
  Accel accelerator(accel_test::test_options());
  const fs::path folder = shared_folder(accelerator, "profile");
  {
    auto profile = accelerator.profile(
        {.schedule = accel::ProfileSchedule{.wait = 1, .active = 2, .repeat = 1},
         .output_dir = folder});
    EXPECT(profile.file() ==
           folder / fmt::format("trace_rank{}.json", accelerator.process_index()));
    train_steps(accelerator, 4);
  }
  accelerator.wait_for_everyone();
  if (!accelerator.is_main_process()) return;
  for (int rank = 0; rank < accelerator.num_processes(); ++rank) {
    std::ifstream in(folder / fmt::format("trace_rank{}.json", rank));
    EXPECT(in.good());
    const nlohmann::json trace = nlohmann::json::parse(in);
    std::map<std::string, int> names;
    std::vector<std::string> steps;
    for (const auto& event : trace.at("traceEvents")) {
      EXPECT(event.at("pid") == rank);
      if (event.at("ph") != "X") continue;
      const std::string name = event.at("name");
      ++names[name.substr(0, name.find(' '))];
      if (event.at("cat") == "step") steps.push_back(name);
    }
    EXPECT((steps == std::vector<std::string>{"step 2", "step 3"}));
    EXPECT(names["forward"] == 2 && names["backward"] == 2 && names["optimizer"] == 2);
    for (const std::string& collective : collectives) EXPECT(names[collective] > 0);
  }
  fs::remove_all(folder);
}

void profile_ddp() { profile_traces<accel::Accelerator<accel::Ddp>>({"allreduce"}); }
void profile_zero3() {
  profile_traces<accel::Accelerator<accel::Zero3>>({"allgather", "reduce_scatter"});
}

// Every rank's timeline reaches the main process's trackers at every step, and each rank's
// phases add up to its step.
void timeline_every_rank() {
  accel::Options options = accel_test::test_options();
  options.timeline = {.enabled = true, .samples_per_step = 32};
  accel::Accelerator<accel::Ddp> accelerator(options);
  const fs::path logs = shared_folder(accelerator, "timeline");
  auto rows = std::make_shared<std::vector<std::map<std::string, double>>>();
  struct Rows {
    std::shared_ptr<std::vector<std::map<std::string, double>>> rows;
    std::string name() const { return "rows"; }
    void start(const accel::tracking::RunStart& /*run*/) {}
    void log(const accel::tracking::Scalars& values, std::int64_t /*step*/, double /*at*/) {
      auto& row = rows->emplace_back();
      for (const auto& [name, number] : values) row[name] = number.value;
    }
    void log_text(const accel::tracking::Texts& /*values*/, std::int64_t /*step*/, double) {}
    void finish() {}
  };
  accelerator.init_trackers("timeline", {},
                            {.log_dir = logs, .run_name = "r",
                             .trackers = {accel::tracking::make_tracker(Rows{rows})}});
  train_steps(accelerator, 3);
  accelerator.end_training();
  if (accelerator.is_main_process()) {
    EXPECT(rows->size() == 3);
    for (const auto& row : *rows) {
      double slowest = 0;
      for (int rank = 0; rank < accelerator.num_processes(); ++rank) {
        const std::string prefix = fmt::format("timeline/rank{}/", rank);
        double phases = 0;
        // Not a list on a line of its own: CMake reads this file's scenario table by lines.
        const std::vector<std::string> names = {"data",          "forward",   "backward",
                                                "communication", "optimizer", "idle"};
        for (const std::string& phase : names) {
          EXPECT(row.count(prefix + phase) == 1);
          phases += row.at(prefix + phase);
        }
        const double step = row.at(prefix + "step");
        EXPECT(step > 0 && std::abs(phases - step) <= 1e-6 * step);
        EXPECT(row.at(prefix + "communication") > 0);  // Ddp's all-reduce, waited for
        slowest = std::max(slowest, step);
      }
      EXPECT(row.at("timeline/step_seconds") == slowest);
      EXPECT(std::abs(row.at("timeline/samples_per_second") - 32 / slowest) <= 1e-9 * 32 / slowest);
    }
    EXPECT(rows->size() == 3 && line_count(logs / "timeline" / "r" / "metrics.jsonl") == 3);
  } else {
    EXPECT(rows->empty());  // main process only
  }
  accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) fs::remove_all(logs);
}

}  // namespace

int run(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"tracking_main_only", tracking_main_only},
      {"gather_empty_objects", gather_empty_objects},
      {"restart_after_kill", restart_after_kill},
      {"two_nodes_ddp", two_nodes_ddp},
      {"profile_ddp", profile_ddp},
      {"profile_zero3", profile_zero3},
      {"timeline_every_rank", timeline_every_rank},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker_everyday
