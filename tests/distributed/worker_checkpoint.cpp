// Checkpoint scenarios across processes (checkpoint.sh runs them in sequence, each phase in new
// processes). ACCEL_TEST_DIR is the folder they share.
//   save_<s>     trains 10 optimizer steps of GradAccum<4> under strategy s; on the way saves
//                "mid" (mid-epoch and mid-window) and "boundary" (the end of epoch 0), and
//                writes the uninterrupted run's digest
//   resume_<s>   new processes: loads "mid" and trains to step 10; the digest must be the
//                uninterrupted run's, bitwise
//   reshard_<s>  loads each "boundary" under the shared folder's subfolders (saved by any
//                strategy at any world size), saves it again beside it as
//                "reshard_<s>_<world>", and checks that both hold the same parameters and
//                optimizer state, element for element
//   kill_in_save rank 0 dies (SIGKILL) in the middle of its second automatic save
//   after_kill   the first automatic checkpoint is the newest committed one, and loads
// AdamW with param groups as users write them (weight decay on the Linear matrices only; none on
// biases, LayerNorm and the embedding), another learning rate per group, a StepLR:
//   groups_<s>       7 steps under s against one process; the shard optimizer keeps each
//                    piece in its parameter's group, with that group's options
//   save_groups_<s>  the same, saving "groups" after step 4, with save_model's "groups_model"
//                    (one file) and "groups_model_sharded" (shards of 256 bytes) of that state,
//                    and "groups_end" after the last step
//   load_groups_<s>  new processes, any world size: loads "groups"; each group's lr and
//                    weight_decay are one process's after 4 steps, the parameters and state
//                    saved again are the loaded ones element for element, and the 3 steps left
//                    end where one process does
//   load_model_<s>   any world size: load_model of "groups_model" (2 ranks) or its shards (other
//                    world sizes) into a fresh program: the parameters are the saved ones,
//                    bitwise, and each rank read only what it keeps (Zero3: its slices, the
//                    ranks' reads adding up to the weights once; Ddp: all of them)
//   checkpoint_tool  one process, no Accelerator: `accel-launch checkpoint` (tools/
//                    checkpoint_tool.hpp) on the folders save_groups_zero3 wrote: verify, merge
//                    byte for byte as save_model, diff, inspect, and each refusal; then leaves
//                    hostile copies of "groups" for the command line (checkpoint.sh tool)
#include "scenario.hpp"

#include <accel/checkpoints.hpp>
#include <accel/tools/checkpoint_tool.hpp>
#include <accel/state/weights_reader.hpp>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

using accel::testing::internals;

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_checkpoint {

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

// One checkpoint's "boundary", loaded under Par at this world size and saved again beside it.
template <class Par>
void reshard_from(const fs::path& from) {
  Program<Par> program;
  auto& [acc, net, adamw, schedule, loader] = program;
  auto [model, optimizer, scheduler, batches] = acc.prepare(net, adamw, schedule, loader);
  acc.load_state(from / "boundary");
  const auto manifest =
      nlohmann::json::parse(accel::state::posix::read_file(from / "boundary" / "manifest.json"));
  const auto steps = manifest["completed_steps"].get<std::int64_t>();
  EXPECT(steps > 2 && acc.completed_steps() == steps);
  // The learning rate after that many scheduled steps, as a fresh schedule computes it.
  torch::optim::AdamW reference(make_model()->parameters(), torch::optim::AdamWOptions(0.02));
  torch::optim::StepLR reference_schedule(reference, 3, 0.7);
  for (std::int64_t i = 0; i < steps; ++i) reference_schedule.step();
  EXPECT(adamw.param_groups()[0].options().get_lr() == reference.param_groups()[0].options().get_lr());
  EXPECT(adamw.param_groups()[0].options().get_lr() != 0.02);
  const fs::path again = from / fmt::format("reshard_{}_{}", Par::name, acc.num_processes());
  acc.save_state(again);
  if (acc.is_main_process()) expect_same_content(from / "boundary", again);
  acc.wait_for_everyone();
}

// Every "boundary" under the shared folder (one per saving strategy and world size, in folders
// of their own), in name order, each with a fresh Accelerator: one launch reshards them all.
template <class Par>
void reshard_run() {
  std::vector<fs::path> sources;
  for (const auto& entry : fs::directory_iterator(shared_folder()))
    if (fs::exists(entry.path() / "boundary")) sources.push_back(entry.path());
  std::sort(sources.begin(), sources.end());
  EXPECT(!sources.empty());
  for (const auto& from : sources) {
    fmt::print("resharding {}\n", from.filename().string());
    reshard_from<Par>(from);
  }
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

// --- AdamW param groups as users write them ----------------------------------------------------

constexpr std::int64_t grouped_vocab = 12, grouped_rows = 6, grouped_len = 5, grouped_steps = 7,
                       grouped_save_at = 4;

torch::nn::Sequential grouped_model() {
  torch::manual_seed(13);
  return torch::nn::Sequential(
      torch::nn::Embedding(grouped_vocab, 8), torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})),
      torch::nn::Linear(8, 10), torch::nn::Functional(torch::tanh), torch::nn::Linear(10, grouped_vocab));
}

// Group 0: the matrices of the Linear layers, with weight decay; group 1: everything else
// (biases, the LayerNorm's weight and bias, the embedding), without, at half the learning rate.
torch::optim::AdamW grouped_adamw(torch::nn::Sequential& net) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& module : net->modules(/*include_self=*/false))
    for (const auto& item : module->named_parameters(/*recurse=*/false)) {
      const bool matrix = module->as<torch::nn::Linear>() != nullptr && item.value().dim() == 2;
      (matrix ? decay : no_decay).push_back(item.value());
    }
  using O = torch::optim::AdamWOptions;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<O>(O(0.02).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<O>(O(0.01).weight_decay(0.0)));
  return torch::optim::AdamW(std::move(groups), O(0.02));
}

const torch::optim::AdamWOptions& adamw_options(const torch::optim::OptimizerParamGroup& group) {
  return static_cast<const torch::optim::AdamWOptions&>(group.options());
}

// Step s's global batch of token sequences; each rank takes its contiguous share of the rows.
std::pair<torch::Tensor, torch::Tensor> grouped_batch(std::int64_t step, int rank, int world) {
  torch::manual_seed(static_cast<std::uint64_t>(700 + step));
  // Tokens 0..5 only: the embedding's other rows get no gradient, so weight decay on them (in
  // the wrong group) would show.
  const torch::Tensor x = torch::randint(0, 6, {grouped_rows, grouped_len}, torch::kLong);
  const torch::Tensor y = torch::randint(0, grouped_vocab, {grouped_rows, grouped_len}, torch::kLong);
  const std::int64_t share = grouped_rows / world;
  return {x.narrow(0, rank * share, share), y.narrow(0, rank * share, share)};
}

torch::Tensor grouped_loss(const torch::Tensor& logits, const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, grouped_vocab}), y.reshape({-1}));
}

// The objects every phase prepares, in one place.
template <class Net>
struct GroupedObjects {
  Net net = grouped_model();
  torch::optim::AdamW adamw = grouped_adamw(net);
  torch::optim::StepLR schedule{adamw, 2, 0.5};
};

// One process, plain libtorch, `steps` steps on the global batches.
struct GroupedReference : GroupedObjects<torch::nn::Sequential> {
  explicit GroupedReference(std::int64_t steps) {
    for (std::int64_t s = 0; s < steps; ++s) {
      const auto [x, y] = grouped_batch(s, 0, 1);
      grouped_loss(net->forward(x), y).backward();
      adamw.step();
      schedule.step();
      adamw.zero_grad();
    }
  }
};

template <class Par>
struct GroupedProgram : GroupedObjects<torch::nn::Sequential> {
  accel::Accelerator<Par> acc{accel_test::test_options()};
};

// Each user group's options are the reference's, exactly.
void expect_same_group_options(const torch::optim::Optimizer& a, const torch::optim::Optimizer& b) {
  EXPECT(a.param_groups().size() == 2 && b.param_groups().size() == 2);
  for (std::size_t g = 0; g < 2; ++g) {
    const auto& oa = adamw_options(a.param_groups()[g]);
    const auto& ob = adamw_options(b.param_groups()[g]);
    EXPECT(oa.lr() == ob.lr() && oa.weight_decay() == ob.weight_decay());
    EXPECT(oa.betas() == ob.betas() && oa.eps() == ob.eps() && oa.amsgrad() == ob.amsgrad());
  }
}

// Trains a prepared program until `until` optimizer steps, saving at `save_at` if given.
template <class Par, class Model, class Optimizer, class Scheduler>
void train_grouped(GroupedProgram<Par>& program, Model& model, Optimizer& optimizer,
                   Scheduler& scheduler, std::int64_t until, const fs::path& save_at = {}) {
  auto& acc = program.acc;
  while (acc.completed_steps() < until) {
    const auto [x, y] = grouped_batch(acc.completed_steps(), acc.process_index(), acc.num_processes());
    acc.backward(grouped_loss(model(x), y));
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
    if (!save_at.empty() && acc.completed_steps() == grouped_save_at) {
      acc.save_state(save_at);
      acc.save_model(model, save_at.string() + "_model");
      acc.save_model(model, save_at.string() + "_model_sharded", 256);
    }
  }
  if (!save_at.empty()) acc.save_state(save_at.string() + "_end");
}

// After the last step: the parameters are one process's (1e-5 relative), and the options too.
template <class Par>
void expect_matches_one_process(GroupedProgram<Par>& program) {
  GroupedReference reference(grouped_steps);
  expect_same_group_options(program.adamw, reference.adamw);
  const auto full = program.acc.full_parameters(program.net);
  const double worst = accel_test::max_relative_difference(*program.net, *reference.net);
  fmt::print("rank {}: max relative difference to one process {:.3g}\n",
             program.acc.process_index(), worst);
  EXPECT(worst <= 1e-5);
  // The embedding rows no token reached are as they started: no weight decay reached them.
  // (By name: under Zero3 the Sequential's children are its units' wrappers.)
  const auto named = program.net->named_parameters();
  const torch::Tensor* embedding = named.find("0.weight");
  EXPECT(embedding != nullptr);
  EXPECT(torch::equal(embedding->narrow(0, 6, 6),
                      grouped_model()[0]->as<torch::nn::Embedding>()->weight.narrow(0, 6, 6)));
}

template <class Par>
void grouped_run(bool save) {
  GroupedProgram<Par> program;
  auto [model, optimizer, scheduler] = program.acc.prepare(program.net, program.adamw, program.schedule);
  train_grouped(program, model, optimizer, scheduler, grouped_steps,
                save ? shared_folder() / "groups" : fs::path());
  expect_matches_one_process(program);
  // The optimizer over this rank's shard: the user's two groups, each with its options, each
  // piece in its parameter's group (the ranks' pieces of a group add up to the group's size).
  const auto* shard = internals(program.acc).strategy().shard_optimizer(program.adamw);
  EXPECT(shard != nullptr);
  EXPECT(shard->param_groups().size() == 2);
  for (std::size_t g = 0; g < 2; ++g) {
    // The options of the last step (the schedule has moved the user's lr since): each group's
    // weight decay, and its learning rate half or twice the other's.
    const auto& mine = adamw_options(shard->param_groups()[g]);
    const auto& user = adamw_options(program.adamw.param_groups()[g]);
    EXPECT(mine.weight_decay() == user.weight_decay());
    EXPECT(mine.lr() == (g == 0 ? 2.0 : 0.5) * adamw_options(shard->param_groups()[1 - g]).lr());
    std::int64_t numel = 0;
    for (const auto& piece : shard->param_groups()[g].params()) numel += piece.numel();
    std::int64_t total = 0;
    for (const auto n : program.acc.gather_object(numel)) total += n;
    const GroupedReference fresh(0);
    std::int64_t expected = 0;
    for (const auto& p : fresh.adamw.param_groups()[g].params()) expected += p.numel();
    EXPECT(total == expected);
  }
}

// Every parameter and AdamW state tensor of two checkpoints of the grouped program, whole,
// compared bitwise; the state named by (group, index in the group).
void expect_same_grouped_content(const fs::path& a, const fs::path& b) {
  auto open = [](const fs::path& folder) {
    accel::state::SliceCatalog catalog;
    for (const auto& entry : fs::directory_iterator(folder))
      if (entry.path().extension() == ".safetensors")
        catalog.add(accel::state::safetensors::File::read(entry.path()), entry.path().string());
    return catalog;
  };
  const auto ca = open(a), cb = open(b);
  GroupedReference shapes(0);
  for (const auto& item : shapes.net->named_parameters()) {
    const std::string name = "model0/" + item.key();
    const std::int64_t numel = item.value().numel();
    EXPECT(torch::equal(ca.read(name, 0, numel, torch::kFloat), cb.read(name, 0, numel, torch::kFloat)));
  }
  std::int64_t compared = 0;
  for (std::size_t g = 0; g < 2; ++g) {
    const auto& params = shapes.adamw.param_groups()[g].params();
    for (std::size_t k = 0; k < params.size(); ++k) {
      for (const char* field : {"exp_avg", "exp_avg_sq"}) {
        const std::string state = fmt::format("optimizer0/{}/{}/{}", g, k, field);
        EXPECT(torch::equal(ca.read(state, 0, params[k].numel(), torch::kFloat),
                            cb.read(state, 0, params[k].numel(), torch::kFloat)));
      }
      const std::string step = fmt::format("optimizer0/{}/{}/step", g, k);
      EXPECT(torch::equal(ca.whole(step), cb.whole(step)));
      ++compared;
    }
  }
  EXPECT(compared == 7);  // 2 matrices; 2 biases, the LayerNorm's 2, the embedding
}

template <class Par>
void load_grouped_run() {
  GroupedProgram<Par> program;
  auto [model, optimizer, scheduler] = program.acc.prepare(program.net, program.adamw, program.schedule);
  program.acc.load_state(shared_folder() / "groups");
  EXPECT(program.acc.completed_steps() == grouped_save_at);
  GroupedReference at_save(grouped_save_at);
  expect_same_group_options(program.adamw, at_save.adamw);
  EXPECT(adamw_options(program.adamw.param_groups()[0]).lr() != 0.02);  // the schedule moved it
  EXPECT(adamw_options(program.adamw.param_groups()[1]).weight_decay() == 0.0);
  const fs::path again =
      shared_folder() / fmt::format("groups_{}_{}", Par::name, program.acc.num_processes());
  program.acc.save_state(again);
  if (program.acc.is_main_process()) expect_same_grouped_content(shared_folder() / "groups", again);
  program.acc.wait_for_everyone();
  train_grouped(program, model, optimizer, scheduler, grouped_steps);
  expect_matches_one_process(program);
}

template <class Par>
void load_model_run() {
  GroupedProgram<Par> program;
  auto [model, optimizer, scheduler] =
      program.acc.prepare(program.net, program.adamw, program.schedule);
  const int world = program.acc.num_processes();
  const fs::path weights = shared_folder() / (world == 2 ? "groups_model" : "groups_model_sharded");
  const std::uint64_t before = accel::state::WeightsReader::bytes_read_in_process();
  program.acc.load_model(model, weights);
  const std::uint64_t read = accel::state::WeightsReader::bytes_read_in_process() - before;
  const auto saved = accel::state::load_weights(weights);
  std::uint64_t total = 0;
  for (const auto& [name, t] : saved) total += static_cast<std::uint64_t>(t.nbytes());
  std::uint64_t all_ranks = 0;
  for (const auto r : program.acc.gather_object(read)) all_ranks += r;
  fmt::print("rank {}: load_model read {} of the weights' {} bytes ({} over {} ranks)\n",
             program.acc.process_index(), read, total, all_ranks, world);
  if constexpr (std::is_same_v<Par, accel::Ddp>) {
    EXPECT(read == total);
  } else {
    EXPECT(all_ranks == total);       // every element read once, by one rank
    EXPECT(read <= total / world + 64);  // this rank's share (a flat's padding is never read)
  }
  const auto full = program.acc.full_parameters(program.net);
  std::map<std::string, torch::Tensor> by_name(saved.begin(), saved.end());
  for (const auto& item : program.net->named_parameters())
    EXPECT(torch::equal(item.value(), by_name.at(item.key())));
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The files of two folders, by name and byte for byte.
void expect_same_files(const fs::path& a, const fs::path& b) {
  std::set<std::string> names_a, names_b;
  for (const auto& entry : fs::directory_iterator(a)) names_a.insert(entry.path().filename());
  for (const auto& entry : fs::directory_iterator(b)) names_b.insert(entry.path().filename());
  EXPECT(names_a == names_b);
  for (const auto& name : names_a) EXPECT(file_text(a / name) == file_text(b / name));
}

using accel_test::error_of;

bool contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  fmt::print(stderr, "expected '{}' in: {}\n", part, text);
  return false;
}

// Copies of "groups" as a hostile or careless hand leaves them, for the command line to refuse
// (checkpoint.sh tool): a negative dimension, a shape of 2^64 elements, a format-1 manifest (no
// checksum of its own) claiming 200000000 processes, and a parameter holding a NaN (its rank
// file and the manifest's record of it rewritten).
void write_hostile_checkpoints(const fs::path& dir) {
  namespace state = accel::state;
  auto edited = [&](const char* name, const auto& edit) {
    fs::copy(dir / "groups", dir / name, fs::copy_options::recursive);
    state::Manifest manifest = state::Manifest::read(dir / name, "test");
    edit(manifest);
    std::ofstream(dir / name / "manifest.json") << manifest.text();
  };
  edited("neg_dim", [](state::Manifest& m) { m.models[0].parameters[0].shape = {-1, 8}; });
  edited("huge_shape", [](state::Manifest& m) {
    m.models[0].parameters[0].shape = {std::int64_t{1} << 62, 4};
  });
  edited("huge_world", [](state::Manifest& m) {
    m.format_version = 1;
    m.world_size = 200000000;
  });
  edited("nan", [&](state::Manifest& m) {
    const fs::path file = dir / "nan" / "rank_0.safetensors";
    const auto read = state::safetensors::File::read(file);
    std::vector<std::pair<std::string, torch::Tensor>> named;
    bool poisoned = false;
    for (const auto& entry : read.header().entries) {
      torch::Tensor t = read.tensor(entry).clone();
      if (!poisoned && entry.name.starts_with("model0/") && t.is_floating_point()) {
        t.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
        poisoned = true;
      }
      named.emplace_back(entry.name, t);
    }
    EXPECT(poisoned);
    state::StreamingChecksum sum;
    const std::uint64_t bytes = state::safetensors::write_file(
        file, named, {}, [&sum](const void* data, std::size_t size) { sum.update(data, size); });
    for (auto& record : m.files)
      if (record.name == "rank_0.safetensors") {
        record.bytes = bytes;
        record.xxh3 = state::checksum_hex(sum.value());
      }
  });
}

void checkpoint_tool() {
  namespace state = accel::state;
  const fs::path dir = shared_folder(), groups = dir / "groups";
  EXPECT(state::verify_checkpoint(groups).empty());

  // merge: save_model's bytes, in one file and in shards of 256 bytes with the index.
  state::merge_checkpoint(groups, dir / "merged", {});
  expect_same_files(dir / "merged", dir / "groups_model");
  state::merge_checkpoint(groups, dir / "merged_sharded", {.max_shard_bytes = 256});
  expect_same_files(dir / "merged_sharded", dir / "groups_model_sharded");
  EXPECT(fs::exists(dir / "merged_sharded" / "model.safetensors.index.json"));
  EXPECT(contains(error_of([&] { state::merge_checkpoint(groups, dir / "merged", {}); }),
                  "exists and is not an empty folder"));
  EXPECT(contains(error_of([&] { state::merge_checkpoint(groups, dir / "m1", {.model = 1}); }),
                  "--model 1: '" + groups.string() + "' holds 1 model"));
  // With the optimizer: each of the 7 slots' exp_avg and exp_avg_sq, whole, and its step.
  state::merge_checkpoint(groups, dir / "merged_optimizer", {.optimizer = true});
  const auto optimizer =
      state::safetensors::File::read(dir / "merged_optimizer" / "optimizer.safetensors");
  std::map<std::string, int> fields;
  for (const auto& entry : optimizer.header().entries)
    ++fields[entry.name.substr(entry.name.rfind('/') + 1)];
  EXPECT(fields.size() == 3 && fields["exp_avg"] == 7 && fields["exp_avg_sq"] == 7 &&
         fields["step"] == 7);
  const GroupedReference shapes(0);
  EXPECT(optimizer.tensor("optimizer0/0/0/exp_avg").numel() ==
         shapes.adamw.param_groups()[0].params()[0].numel());

  // diff: a checkpoint against itself, and against the one 3 steps later.
  for (const auto& row : state::diff_checkpoints(groups, groups)) EXPECT(row.status == "equal");
  int differing = 0;
  for (const auto& row : state::diff_checkpoints(groups, dir / "groups_end")) {
    EXPECT(row.status == "equal" || row.status == "differs");
    if (row.status == "differs") {
      ++differing;
      EXPECT(row.max_abs > 0 && row.max_rel > 0);
    }
  }
  EXPECT(differing > 0);

  // inspect: the policies, the world size, the optimizer, the checked files.
  const std::string text = state::describe_checkpoint(groups);
  for (const char* part : {"Zero3 + Fp32 + GradAccum<1> on 2 processes",
                           "4 optimizer steps completed", "torch::optim::AdamW, 2 param groups",
                           "rank_1.safetensors", "checksum ok"})
    EXPECT(contains(text, part));

  // A flipped bit: verify names the file, merge and diff refuse it.
  fs::copy(groups, dir / "flipped", fs::copy_options::recursive);
  {
    std::fstream file(dir / "flipped" / "rank_1.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-3, std::ios::end);
    char c = 0;
    file.get(c);
    file.seekp(-3, std::ios::end);
    file.put(static_cast<char>(c ^ 1));
  }
  const auto flipped = state::verify_checkpoint(dir / "flipped");
  EXPECT(flipped.size() == 2 && contains(flipped[0], "rank_1.safetensors' has checksum") &&
         contains(flipped[1], "coverage not checked"));
  EXPECT(contains(error_of([&] { state::merge_checkpoint(dir / "flipped", dir / "m2", {}); }),
                  "checkpoint merge: '" + (dir / "flipped" / "rank_1.safetensors").string() +
                      "' has checksum"));
  EXPECT(!fs::exists(dir / "m2"));
  EXPECT(contains(error_of([&] { state::diff_checkpoints(groups, dir / "flipped"); }),
                  "has checksum"));

  // A manifest that no longer names rank 1's file (its checksum right): every element rank 1
  // held is missing, named, and merge refuses.
  fs::copy(groups, dir / "partial", fs::copy_options::recursive);
  state::Manifest manifest = state::Manifest::read(dir / "partial", "test");
  std::erase_if(manifest.files, [](const auto& f) { return f.name == "rank_1.safetensors"; });
  fs::remove(dir / "partial" / "rank_1.safetensors");
  std::ofstream(dir / "partial" / "manifest.json") << manifest.text();
  const auto partial = state::verify_checkpoint(dir / "partial");
  EXPECT(partial.size() >= 3);
  EXPECT(contains(partial.front(), "the manifest names no rank_1.safetensors for rank 1 of 2"));
  bool gap = false;
  for (const auto& problem : partial) gap = gap || problem.find("in no rank file") != std::string::npos;
  EXPECT(gap);
  EXPECT(contains(error_of([&] { state::merge_checkpoint(dir / "partial", dir / "m3", {}); }),
                  "are in none of its rank files"));
  // A folder that is not a checkpoint.
  EXPECT(contains(state::verify_checkpoint(dir / "groups_model").front(),
                  "has no manifest.json: it is not a checkpoint"));
  write_hostile_checkpoints(dir);
  // A NaN equals itself at the same place: the checkpoint is equal to itself.
  for (const auto& row : state::diff_checkpoints(dir / "nan", dir / "nan"))
    EXPECT(row.status == "equal");
}

}  // namespace

int run(int argc, char** argv) {
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
       {"groups_zero2", [] { grouped_run<Zero2>(false); }},
       {"groups_zero3", [] { grouped_run<Zero3>(false); }},
       {"save_groups_zero3", [] { grouped_run<Zero3>(true); }},
       {"load_groups_zero2", load_grouped_run<Zero2>},
       {"load_groups_zero3", load_grouped_run<Zero3>},
       {"checkpoint_tool", checkpoint_tool},
       {"load_model_zero3", load_model_run<Zero3>},
       {"load_model_ddp", load_model_run<Ddp>},
       {"kill_in_save", kill_in_save},
       {"after_kill", after_kill}});
}

}  // namespace dist_worker_checkpoint
