// Checkpoint scenarios across processes (checkpoint.sh runs them in sequence, each phase in new
// processes). ACCEL_TEST_DIR is the folder they share.
//   save_<s>     trains 10 optimizer steps of GradAccum<4> under strategy s; on the way saves
//                "mid" (mid-epoch and mid-window) and "boundary" (the end of epoch 0), and
//                writes the uninterrupted run's digest
//   resume_<s>   new processes: loads "mid" and trains to step 10; the digest must be the
//                uninterrupted run's, bitwise
//   reshard_<s>  loads "boundary" (saved by any strategy at any world size), saves it again as
//                "reshard_<s>_<world>", and checks that both hold the same parameters and
//                optimizer state, element for element
//   kill_in_save rank 0 dies (SIGKILL) in the middle of its second automatic save
//   after_kill   the first automatic checkpoint is the newest committed one, and loads
#include "scenario.hpp"

#include <accel/checkpoints.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Sample {
  torch::Tensor x;
  torch::Tensor y;
};
struct Data {
  std::int64_t size() const { return 53; }
  Sample get(std::int64_t i) const {
    const float v = static_cast<float>(i);
    return {torch::tensor({std::sin(v), std::cos(v), v / 53, 1.0f}), torch::tensor({v / 30})};
  }
};

fs::path shared_folder() {
  const char* folder = std::getenv("ACCEL_TEST_DIR");
  if (folder == nullptr) throw std::runtime_error("ACCEL_TEST_DIR is not set");
  return folder;
}

torch::nn::Sequential make_model() {
  torch::manual_seed(11);
  return torch::nn::Sequential(torch::nn::Linear(4, 16), torch::nn::Functional(torch::relu),
                               torch::nn::Linear(16, 9), torch::nn::Functional(torch::tanh),
                               torch::nn::Linear(9, 1));
}

template <class Accel>
std::string digest(Accel& acc, torch::nn::Sequential& net) {
  const auto full = acc.full_parameters(net);
  return accel::state::parameter_digest_hex(*net);
}

constexpr std::int64_t total_steps = 10;
// Micro-steps: mid-epoch and mid-window at 1 rank (27 batches an epoch: windows of 4, 4, 4, 4,
// 4, 4, 3; this is the first of the sixth) and at 2 (14 each: 4, 4, 4, 2; the third of epoch 1's
// second window).
constexpr std::int64_t save_mid_after = 21;

// ACCEL_TEST_OFFLOAD=optimizer or parameters: the same programs with Options::offload.
accel::Options program_options() {
  accel::Options options = accel_test::test_options();
  const char* offload = std::getenv("ACCEL_TEST_OFFLOAD");
  const std::string what = offload == nullptr ? "" : offload;
  options.offload = {.optimizer = what == "optimizer", .parameters = what == "parameters"};
  return options;
}

// What the save, resume and reshard phases train: the same objects, prepared the same way.
template <class Par>
struct Program {
  accel::Accelerator<Par, accel::Fp32, accel::GradAccum<4>> acc{program_options()};
  torch::nn::Sequential net = make_model();
  torch::optim::AdamW adamw{net->parameters(), torch::optim::AdamWOptions(0.02).weight_decay(0.1)};
  torch::optim::StepLR schedule{adamw, 3, 0.7};
  accel::DataLoader<Data> loader{Data(), {.batch_size = 2, .shuffle = true, .seed = 4}};
};

// One program: resume from `from` if given, train to total_steps, saving on the way when asked.
template <class Par>
std::string train(const fs::path& from, bool save) {
  Program<Par> program;
  auto& [acc, net, adamw, schedule, loader] = program;
  auto [model, optimizer, scheduler, batches] = acc.prepare(net, adamw, schedule, loader);
  if (!from.empty()) acc.load_state(from);
  std::int64_t micro = 0;
  while (acc.completed_steps() < total_steps)
    for (const auto& batch : batches) {
      acc.backward(torch::mse_loss(model(batch.x), batch.y));
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      ++micro;
      if (save && micro == save_mid_after) {
        EXPECT(!acc.sync_gradients());
        acc.save_state(shared_folder() / "mid");
      }
      // The end of epoch 0 (always the end of a window): a position any world size resumes.
      if (save && acc.end_of_data() && acc.completed_steps() < 8)
        acc.save_state(shared_folder() / "boundary");
      if (acc.completed_steps() == total_steps) break;
    }
  return digest(acc, net);
}

template <class Par>
void save_run() {
  const std::string straight = train<Par>({}, true);
  if (std::getenv("RANK") == nullptr || std::string(std::getenv("RANK")) == "0")
    std::ofstream(shared_folder() / "straight.txt") << straight;
}

template <class Par>
void resume_run() {
  std::string straight;
  std::ifstream(shared_folder() / "straight.txt") >> straight;
  const std::string resumed = train<Par>(shared_folder() / "mid", false);
  fmt::print("uninterrupted {} resumed {}\n", straight, resumed);
  EXPECT(!straight.empty() && resumed == straight);
}

// Every parameter and optimizer state tensor of two checkpoints, assembled whole from their rank
// files, compared bitwise.
void expect_same_content(const fs::path& a, const fs::path& b) {
  auto open = [](const fs::path& folder) {
    accel::state::SliceCatalog catalog;
    for (const auto& entry : fs::directory_iterator(folder))
      if (entry.path().extension() == ".safetensors")
        catalog.add(accel::state::safetensors::File::read(entry.path()), entry.path().string());
    return catalog;
  };
  const auto ca = open(a), cb = open(b);
  const auto manifest = nlohmann::json::parse(accel::state::posix::read_file(a / "manifest.json"));
  std::int64_t compared = 0;
  for (const auto& p : manifest["models"][0]["parameters"]) {
    std::int64_t numel = 1;
    for (const auto& d : p["shape"]) numel *= d.get<std::int64_t>();
    const std::string name = "model0/" + p["name"].get<std::string>();
    EXPECT(torch::equal(ca.read(name, 0, numel, torch::kFloat), cb.read(name, 0, numel, torch::kFloat)));
    for (const char* field : {"exp_avg", "exp_avg_sq"}) {
      std::int64_t index = compared;  // parameters are one group, in model order
      const std::string state = fmt::format("optimizer0/0/{}/{}", index, field);
      EXPECT(torch::equal(ca.read(state, 0, numel, torch::kFloat), cb.read(state, 0, numel, torch::kFloat)));
    }
    const std::string step = fmt::format("optimizer0/0/{}/step", compared);
    EXPECT(torch::equal(ca.whole(step), cb.whole(step)));
    ++compared;
  }
  EXPECT(compared == 6);
}

template <class Par>
void reshard_run() {
  Program<Par> program;
  auto& [acc, net, adamw, schedule, loader] = program;
  auto [model, optimizer, scheduler, batches] = acc.prepare(net, adamw, schedule, loader);
  acc.load_state(shared_folder() / "boundary");
  const auto manifest =
      nlohmann::json::parse(accel::state::posix::read_file(shared_folder() / "boundary" / "manifest.json"));
  const auto steps = manifest["completed_steps"].get<std::int64_t>();
  EXPECT(steps > 2 && acc.completed_steps() == steps);
  // The learning rate after that many scheduled steps, as a fresh schedule computes it.
  torch::optim::AdamW reference(make_model()->parameters(), torch::optim::AdamWOptions(0.02));
  torch::optim::StepLR reference_schedule(reference, 3, 0.7);
  for (std::int64_t i = 0; i < steps; ++i) reference_schedule.step();
  EXPECT(adamw.param_groups()[0].options().get_lr() == reference.param_groups()[0].options().get_lr());
  EXPECT(adamw.param_groups()[0].options().get_lr() != 0.02);
  const fs::path again =
      shared_folder() / fmt::format("reshard_{}_{}", Par::name, acc.num_processes());
  acc.save_state(again);
  if (acc.is_main_process()) expect_same_content(shared_folder() / "boundary", again);
  acc.wait_for_everyone();
}

// Rank 0's registered object kills it in the middle of the second save.
struct Killer {
  bool armed = false;
  void save(torch::serialize::OutputArchive& archive) const {
    if (armed && std::getenv("RANK") != nullptr && std::string(std::getenv("RANK")) == "0")
      std::raise(SIGKILL);
    archive.write("armed", torch::tensor(armed ? 1 : 0));
  }
  void load(torch::serialize::InputArchive& archive) {
    torch::Tensor value;
    archive.read("armed", value);
    armed = value.item<int>() != 0;
  }
};

// Both phases: Zero2 over the same model, automatic checkpoints, the Killer registered.
struct KillRun {
  static accel::Options options() {
    accel::Options options = accel_test::test_options();
    options.checkpoints.directory = shared_folder() / "auto";
    return options;
  }
  accel::Accelerator<accel::Zero2> acc{options()};
  torch::nn::Sequential net = make_model();
  torch::optim::Adam adam{net->parameters(), 0.01};
  Killer killer;
  KillRun() { acc.register_for_checkpointing(killer); }
};

void kill_in_save() {
  KillRun run;
  auto& [acc, net, adam, killer] = run;
  auto [model, optimizer] = acc.prepare(net, adam);
  acc.backward(model(torch::ones({2, 4})).sum());
  optimizer.step();
  acc.save_state();
  killer.armed = true;
  acc.backward(model(torch::ones({2, 4})).sum());
  optimizer.step();
  acc.save_state();  // rank 0 dies in here
  EXPECT(false);
}

void after_kill() {
  KillRun run;
  auto& [acc, net, adam, killer] = run;
  auto [model, optimizer] = acc.prepare(net, adam);
  EXPECT(fs::exists(shared_folder() / "auto" / ".checkpoint_1.partial"));
  EXPECT(acc.load_state() == shared_folder() / "auto" / "checkpoint_0");
  EXPECT(!killer.armed && acc.completed_steps() == 1);
  EXPECT(acc.save_state() == shared_folder() / "auto" / "checkpoint_2");
  // The crashed save's staging folder is cleared once a newer checkpoint is committed.
  EXPECT(!fs::exists(shared_folder() / "auto" / ".checkpoint_1.partial"));
}

}  // namespace

int main(int argc, char** argv) {
  using accel::Ddp, accel::Zero2, accel::Zero3;
  return accel_test::run_scenario(
      argc, argv,
      {{"save_ddp", save_run<Ddp>},
       {"save_zero2", save_run<Zero2>},
       {"save_zero3", save_run<Zero3>},
       {"resume_ddp", resume_run<Ddp>},
       {"resume_zero2", resume_run<Zero2>},
       {"resume_zero3", resume_run<Zero3>},
       {"reshard_ddp", reshard_run<Ddp>},
       {"reshard_zero2", reshard_run<Zero2>},
       {"reshard_zero3", reshard_run<Zero3>},
       {"kill_in_save", kill_in_save},
       {"after_kill", after_kill}});
}
