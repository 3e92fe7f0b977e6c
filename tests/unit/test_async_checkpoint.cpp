// save_state(SaveMode::async) and Options::checkpoints' periodic saves and resume on one
// process: a background save holds what the loop held when save_state() returned, a failed write
// is the next call's error and leaves the old checkpoint whole, and a run resumed by
// Options::checkpoints.resume continues bitwise (docs/how-to/fault-tolerance.md). The kill-and-restart
// test over two processes is example.gpt.kill_resume.nproc2 (tests/example/kill-resume.sh).
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>
#include <accel/memory.hpp>
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

// A namespace of its own: the test binaries compile as unity builds (tests/CMakeLists.txt).
namespace unit_async_checkpoint {

namespace {

namespace fs = std::filesystem;

struct Sample {
  torch::Tensor x;
  torch::Tensor y;
};
struct Data {
  std::int64_t size() const { return 40; }
  Sample get(std::int64_t i) const {
    const float v = static_cast<float>(i);
    return {torch::tensor({v / 40, 1 - v / 40, v / 80}), torch::tensor({v / 20})};
  }
};

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(3, 8));
    drop = register_module("drop", torch::nn::Dropout(0.2));
    fc2 = register_module("fc2", torch::nn::Linear(8, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2->forward(drop->forward(torch::relu(fc1->forward(x))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

fs::path fresh_folder(const std::string& name) {
  const fs::path folder =
      fs::temp_directory_path() / fmt::format("accel_async_{}_{}", name, ::getpid());
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder;
}

// The message of what `call` throws ("" when it returns).
template <class F>
std::string message_of(F&& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

using Strategy = accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<4>>;

// One program: `steps` optimizer steps (a shuffled loader, dropout, a scheduler, 14 batches an
// epoch, windows of 4); with `options` its checkpoints; after `save_after` micro-steps a
// background save into `save_to`. The scheduler is prepared separately when `scheduler_apart`.
struct Run {
  std::int64_t steps = 6;
  accel::CheckpointOptions checkpoints = {};
  std::int64_t save_after = -1;
  fs::path save_to = {};
  bool scheduler_apart = false;
  std::optional<fs::path>* resumed_from = nullptr;
  std::int64_t* snapshot_bytes = nullptr;
};

std::uint64_t train(const Run& run) {
  Strategy acc({.seed = 7, .checkpoints = run.checkpoints});
  Net net;
  torch::optim::Adam adam(net->parameters(), 0.01);
  torch::optim::StepLR schedule(adam, 2, 0.5);
  accel::DataLoader loader(Data(), {.batch_size = 3, .shuffle = true, .seed = 3});
  auto [model, optimizer, batches] = acc.prepare(net, adam, loader);
  auto scheduler = acc.prepare(schedule);
  if (run.resumed_from != nullptr) *run.resumed_from = acc.resumed_from();
  std::int64_t micro = 0;
  while (acc.completed_steps() < run.steps) {
    for (const auto& batch : batches) {
      acc.backward(torch::mse_loss(model(batch.x), batch.y));
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      if (++micro == run.save_after) acc.save_state(run.save_to, accel::SaveMode::async);
      if (acc.completed_steps() == run.steps) break;
    }
  }
  acc.end_training();
  if (run.snapshot_bytes != nullptr) *run.snapshot_bytes = acc.memory_use().checkpoint_snapshot;
  return accel::state::parameter_digest(*net);
}

}  // namespace

TEST_CASE("async checkpoint: a background save holds the state save_state() returned at, and a "
          "run loaded from it continues bitwise") {
  const fs::path folder = fresh_folder("snapshot");
  const std::uint64_t straight = train({.steps = 6});
  // Micro-step 9: mid-window; 14: the epoch's last batch. The loop changes every parameter
  // right after save_state() returns, while the background thread writes.
  for (const std::int64_t after : {9, 14}) {
    CAPTURE(after);
    const fs::path at = folder / fmt::format("after_{}", after);
    std::int64_t snapshot = 0;
    CHECK(train({.steps = 6, .save_after = after, .save_to = at, .snapshot_bytes = &snapshot}) ==
          straight);
    CHECK(fs::exists(at / "manifest.json"));
    CHECK(snapshot > 0);  // memory_use() counts the snapshot kept for the next save
    // Loaded by hand (the run's own steps are counted from the checkpoint).
    Strategy acc({.seed = 7});
    Net net;
    torch::optim::Adam adam(net->parameters(), 0.01);
    torch::optim::StepLR schedule(adam, 2, 0.5);
    accel::DataLoader loader(Data(), {.batch_size = 3, .shuffle = true, .seed = 3});
    auto [model, optimizer, batches] = acc.prepare(net, adam, loader);
    auto scheduler = acc.prepare(schedule);
    acc.load_state(at);
    while (acc.completed_steps() < 6) {
      for (const auto& batch : batches) {
        acc.backward(torch::mse_loss(model(batch.x), batch.y));
        optimizer.step();
        scheduler.step();
        optimizer.zero_grad();
        if (acc.completed_steps() == 6) break;
      }
    }
    CHECK(accel::state::parameter_digest(*net) == straight);
  }
  fs::remove_all(folder);
}

TEST_CASE("async checkpoint: a failed background write is the next call's error, once, and "
          "leaves no partial files and the old checkpoint whole") {
  const fs::path folder = fresh_folder("failed");
  Strategy acc({.seed = 6});
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  acc.save_state(folder / "ck");
  const std::string manifest = read_text(folder / "ck" / "manifest.json");
  // A file size limit stands in for a full disk: the rank file's write fails part way, on the
  // background thread.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 1024;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  acc.save_state(folder / "ck", accel::SaveMode::async);  // returns: the write fails later
  const std::string error = message_of([&] { acc.save_state(folder / "other"); });
  CHECK(error.starts_with("accel: save_state in the background: "));
  CHECK(error.find("File too large") != std::string::npos);
  CHECK(error.find("was not committed") != std::string::npos);
  acc.save_state(folder / "ck", accel::SaveMode::async);
  CHECK_THROWS_WITH(acc.end_training(), doctest::Contains("File too large"));
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
  std::signal(SIGXFSZ, previous);
  acc.end_training();  // reported once
  CHECK_FALSE(fs::exists(folder / ".ck.partial"));
  CHECK_FALSE(fs::exists(folder / "other"));
  CHECK(read_text(folder / "ck" / "manifest.json") == manifest);
  acc.load_state(folder / "ck");
  fs::remove_all(folder);
}

TEST_CASE("async checkpoint: a failed background write that no later call reports ends the "
          "process with status 1 and the error on stderr") {
  const fs::path folder = fresh_folder("at_exit");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (std::freopen((folder / "stderr.txt").c_str(), "w", stderr) == nullptr) ::_exit(10);
    std::signal(SIGXFSZ, SIG_IGN);
    {
      accel::Accelerator<accel::Ddp> acc({.seed = 6});
      Net net;
      torch::optim::SGD sgd(net->parameters(), 0.1);
      auto [model, optimizer] = acc.prepare(net, sgd);
      rlimit small{};
      if (::getrlimit(RLIMIT_FSIZE, &small) != 0) ::_exit(11);
      small.rlim_cur = 1024;
      if (::setrlimit(RLIMIT_FSIZE, &small) != 0) ::_exit(12);
      acc.save_state(folder / "ck", accel::SaveMode::async);
    }  // the Accelerator's end: the write's failure is reported here
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  const std::string error = read_text(folder / "stderr.txt");
  CHECK(error.find("accel: save_state in the background: ") != std::string::npos);
  CHECK(error.find("File too large") != std::string::npos);
  CHECK_FALSE(fs::exists(folder / "ck"));
  CHECK_FALSE(fs::exists(folder / ".ck.partial"));
  fs::remove_all(folder);
}

TEST_CASE("async checkpoint: memory_use() and estimate_memory count the snapshot's host memory") {
  const fs::path folder = fresh_folder("memory");
  accel::Accelerator<accel::Ddp> acc({.seed = 5});
  Net net;
  const accel::MemoryEstimate estimate = accel::estimate_memory<accel::Ddp>(
      net, 1, {.optimizer = accel::OptimizerKind::adam, .async_checkpoint = true});
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  CHECK(acc.memory_use().checkpoint_snapshot == 0);
  acc.backward(model(torch::ones({2, 3})).sum());
  optimizer.step();
  optimizer.zero_grad();
  acc.save_state(folder / "ck", accel::SaveMode::async);
  acc.end_training();
  const std::int64_t used = acc.memory_use().checkpoint_snapshot;
  // The parameters and Adam's two moments (3 x 41 floats), and what the estimate leaves out: the
  // step counters and the RNG's state.
  CHECK(estimate.checkpoint_snapshot == 3 * 41 * 4);
  CHECK(used >= estimate.checkpoint_snapshot);
  CHECK(used < estimate.checkpoint_snapshot + 65536);
  CHECK(acc.memory_use().total() == acc.memory_use().parameters + acc.memory_use().gradients +
                                         acc.memory_use().optimizer_state + used);
  // The next save reuses the buffers: the same bytes, not twice.
  acc.save_state(folder / "ck", accel::SaveMode::async);
  acc.end_training();
  CHECK(acc.memory_use().checkpoint_snapshot == used);
  fs::remove_all(folder);
}

TEST_CASE("periodic checkpoints: every_steps saves between batches, and Options::checkpoints."
          "resume continues the newest bitwise, or starts afresh without one") {
  const fs::path folder = fresh_folder("periodic");
  const std::uint64_t straight = train({.steps = 6});
  for (const bool async : {false, true}) {
    CAPTURE(async);
    const fs::path root = folder / (async ? "async" : "sync");
    const accel::CheckpointOptions checkpoints{
        .directory = root, .every_steps = 2, .async = async, .resume = true};
    // A run cut short after 5 steps, as a crash would: checkpoints at steps 2 and 4, started
    // afresh on an empty folder.
    std::optional<fs::path> resumed;
    CHECK(train({.steps = 5, .checkpoints = checkpoints, .resumed_from = &resumed}) ==
          train({.steps = 5}));
    CHECK_FALSE(resumed);
    CHECK(fs::exists(root / "checkpoint_0" / "manifest.json"));
    CHECK(fs::exists(root / "checkpoint_1" / "manifest.json"));
    CHECK_FALSE(fs::exists(root / "checkpoint_2"));
    // The same program again: it resumes from step 4 (the scheduler prepared in a second
    // prepare() call: the load waits for it) and ends as the straight run.
    CHECK(train({.steps = 6, .checkpoints = checkpoints, .resumed_from = &resumed}) == straight);
    REQUIRE(resumed);
    CHECK(resumed->filename() == "checkpoint_1");
  }
  fs::remove_all(folder);
}

TEST_CASE("periodic checkpoints: a resume still waiting for what the checkpoint holds when "
          "training begins is an error naming it, and bad options are refused") {
  const fs::path folder = fresh_folder("waiting");
  const accel::CheckpointOptions checkpoints{.directory = folder, .every_steps = 1, .resume = true};
  train({.steps = 2, .checkpoints = checkpoints});
  {
    Strategy acc({.seed = 7, .checkpoints = checkpoints});
    Net net;
    torch::optim::Adam adam(net->parameters(), 0.01);
    accel::DataLoader loader(Data(), {.batch_size = 3, .shuffle = true, .seed = 3});
    auto [model, optimizer, batches] = acc.prepare(net, adam, loader);  // no scheduler
    CHECK_FALSE(acc.resumed_from());
    const std::string error = message_of([&] { (void)batches.begin(); });
    CHECK(error.starts_with("accel: Options::checkpoints.resume: training began before"));
    CHECK(error.find("holds 1 model(s), 1 optimizer(s), 1 LR scheduler(s)") != std::string::npos);
    CHECK(error.find("0 LR scheduler(s) and 1 data loader(s) are prepared") != std::string::npos);
  }
  CHECK_THROWS_WITH(Strategy({.checkpoints = {.directory = folder / "a", .every_steps = -1}}),
                    doctest::Contains("accel: Options::checkpoints.every_steps is -1"));
  CHECK_THROWS_WITH(Strategy({.checkpoints = {.directory = folder / "b", .every_seconds = -2}}),
                    doctest::Contains("accel: Options::checkpoints.every_seconds is -2"));
  fs::remove_all(folder);
}

}  // namespace unit_async_checkpoint
