// save_state / load_state on one process: exact continuation (mid-epoch, mid-window, with a
// scheduler, a shuffled loader and dropout), crash safety of the folder protocol, automatic
// naming and its limit, and staged loading: a corrupt checkpoint changes nothing; the pre-hooks.
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>
#include <accel/state/slice_catalog.hpp>
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_checkpoint {

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
    register_buffer("seen", torch::zeros({1}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2->forward(drop->forward(torch::relu(fc1->forward(x))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

struct Counters {
  std::int64_t evaluations = 0;
  double best = 1e9;
};

fs::path fresh_folder(const std::string& name) {
  const fs::path folder = fs::temp_directory_path() / fmt::format("accel_ckpt_{}_{}", name, ::getpid());
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder;
}

using Strategy = accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<4>>;

// One training program: `steps` optimizer steps in total; after `save_after` micro-steps it saves
// into `save_to`; with `resume_from` it loads first and continues where that run left off.
struct Run {
  std::int64_t steps = 6;
  std::int64_t save_after = -1;
  fs::path save_to = {};
  fs::path resume_from = {};
  accel::OffloadOptions offload = {};
};

template <class Accel = Strategy>
std::uint64_t train(const Run& run, Counters* counters_out = nullptr) {
  Accel acc({.seed = 7, .offload = run.offload});
  Net net;
  torch::optim::Adam adam(net->parameters(), 0.01);
  torch::optim::StepLR schedule(adam, 2, 0.5);
  accel::DataLoader loader(Data(), {.batch_size = 3, .shuffle = true, .seed = 3});
  Counters counters;
  acc.register_for_checkpointing(counters);
  auto [model, optimizer, scheduler, batches] = acc.prepare(net, adam, schedule, loader);
  if (!run.resume_from.empty()) acc.load_state(run.resume_from);
  std::int64_t micro = 0;
  while (acc.completed_steps() < run.steps) {
    for (const auto& batch : batches) {
      acc.backward(torch::mse_loss(model(batch.x), batch.y));
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      ++counters.evaluations;
      if (++micro == run.save_after) acc.save_state(run.save_to);
      if (acc.completed_steps() == run.steps) break;
    }
  }
  if (counters_out != nullptr) *counters_out = counters;
  return accel::state::parameter_digest(*net);
}

void flip_byte(const fs::path& file, std::int64_t from_end) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const std::int64_t size = f.tellg();
  f.seekg(size - from_end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(size - from_end);
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("checkpoint: a resumed run continues bitwise, mid-epoch and mid-window") {
  const fs::path folder = fresh_folder("resume");
  const std::uint64_t straight = train({.steps = 6});
  // 14 micro-steps: epoch 0 holds 14 batches of 3 (40 samples), so this is its last batch, and
  // micro-step 2 of the fourth window.
  for (const std::int64_t after : {6, 14, 17}) {
    CAPTURE(after);
    const fs::path at = folder / fmt::format("after_{}", after);
    Counters saved_run, resumed_run;
    CHECK(train({.steps = 6, .save_after = after, .save_to = at}, &saved_run) == straight);
    CHECK(fs::exists(at / "manifest.json"));
    CHECK(train({.steps = 6, .resume_from = at}, &resumed_run) == straight);
    CHECK(resumed_run.evaluations == saved_run.evaluations);  // the registered struct came back
  }
  fs::remove_all(folder);
}

// On one process Options::offload.optimizer steps CPU copies of the parameters: the same
// arithmetic as stepping them in place, and the copies must come back from a checkpoint.
TEST_CASE("checkpoint: offload.optimizer on one process trains as without it and resumes bitwise") {
  using Offloaded = accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<4>>;
  const fs::path folder = fresh_folder("offload");
  const std::uint64_t straight = train({.steps = 6});
  const Run offloaded{.steps = 6, .offload = {.optimizer = true}};
  CHECK(train<Offloaded>(offloaded) == straight);
  Run saving = offloaded;
  saving.save_after = 14;
  saving.save_to = folder / "after_14";
  CHECK(train<Offloaded>(saving) == straight);
  Run resuming = offloaded;
  resuming.resume_from = saving.save_to;
  CHECK(train<Offloaded>(resuming) == straight);
  // Its state is read by a run without offload too (the same slices).
  CHECK(train({.steps = 6, .resume_from = saving.save_to}) == straight);
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: automatic naming, total limit, newest committed chosen") {
  const fs::path root = fresh_folder("auto");
  accel::Options options{.seed = 1};
  options.checkpoints = {.directory = root, .total_limit = 2};
  Strategy acc(options);
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  CHECK(acc.save_state() == root / "checkpoint_0");
  CHECK(acc.save_state() == root / "checkpoint_1");
  CHECK(acc.save_state() == root / "checkpoint_2");
  CHECK_FALSE(fs::exists(root / "checkpoint_0"));  // pruned after checkpoint_2 committed
  // A crashed save leaves a staging folder and a folder without manifest: both passed over.
  fs::create_directories(root / ".checkpoint_3.partial");
  fs::create_directories(root / "checkpoint_4");
  CHECK(acc.load_state() == root / "checkpoint_2");
  CHECK(acc.save_state() == root / "checkpoint_5");  // numbers are never reused
  fs::remove_all(root);
}

TEST_CASE("checkpoint: pre-hooks get the folder, in order, before its files are written or read") {
  const fs::path root = fresh_folder("hooks");
  accel::Options options{.seed = 1};
  options.checkpoints = {.directory = root};
  Strategy acc(options);
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  Counters counters;
  acc.register_for_checkpointing(counters);
  auto [model, optimizer] = acc.prepare(net, sgd);
  std::vector<std::string> calls;
  acc.register_save_state_pre_hook([&](const fs::path& folder) {
    calls.push_back("save a " + folder.string());
    CHECK_FALSE(fs::exists(folder));  // nothing of the checkpoint yet
    counters.evaluations = 42;        // what it will hold
  });
  acc.register_save_state_pre_hook(
      [&](const fs::path& folder) { calls.push_back("save b " + folder.string()); });
  acc.register_load_state_pre_hook([&](const fs::path& folder) {
    calls.push_back("load " + folder.string());
    CHECK(counters.evaluations == 7);  // not read yet
  });
  const fs::path saved = acc.save_state();
  CHECK(saved == root / "checkpoint_0");
  counters.evaluations = 7;
  CHECK(acc.load_state() == saved);
  CHECK(counters.evaluations == 42);
  CHECK(calls == std::vector<std::string>{"save a " + saved.string(), "save b " + saved.string(),
                                          "load " + saved.string()});

  // A hook that throws stops the save before anything is written, naming the hook.
  acc.register_save_state_pre_hook(
      [](const fs::path&) { throw std::runtime_error("the extra state is not ready"); });
  CHECK_THROWS_WITH_AS(acc.save_state(root / "explicit"),
                       doctest::Contains("save_state: pre-hook #3 (of 3, in registration order) "
                                         "failed for"),
                       accel::Error);
  CHECK_FALSE(fs::exists(root / "explicit"));
  CHECK_FALSE(fs::exists(root / ".explicit.partial"));
  CHECK_THROWS_WITH_AS(acc.register_load_state_pre_hook(nullptr),
                       doctest::Contains("register_load_state_pre_hook(): the hook is empty"),
                       accel::Error);
  fs::remove_all(root);
}

TEST_CASE("checkpoint: a corrupt or truncated file is refused and changes nothing") {
  const fs::path folder = fresh_folder("corrupt");
  Strategy acc({.seed = 2});
  Net net;
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  acc.backward(model(torch::ones({2, 3})).sum());
  acc.backward(model(torch::ones({2, 3})).sum());
  acc.backward(model(torch::ones({2, 3})).sum());
  acc.backward(model(torch::ones({2, 3})).sum());
  optimizer.step();
  const fs::path good = folder / "good";
  acc.save_state(good);
  // Move away from the saved state, then try to load broken copies of it.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.add_(1.0);
  }
  const std::uint64_t before = accel::state::parameter_digest(*net);
  auto broken = [&](const std::string& name) {
    const fs::path copy = folder / name;
    fs::copy(good, copy, fs::copy_options::recursive);
    return copy;
  };
  const fs::path flipped = broken("flipped");
  flip_byte(flipped / "rank_0.safetensors", 5);
  CHECK_THROWS_WITH(acc.load_state(flipped),
                    doctest::Contains("rank_0.safetensors' has checksum"));
  const fs::path truncated = broken("truncated");
  fs::resize_file(truncated / "rank_0.safetensors", 100);
  CHECK_THROWS_WITH(acc.load_state(truncated), doctest::Contains("holds 100 bytes"));
  // A flipped byte in the safetensors header (its JSON) is caught by the checksum too, before
  // the header is parsed.
  const fs::path header = broken("header");
  {
    std::fstream f(header / "rank_0.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.put('~');
  }
  CHECK_THROWS_WITH(acc.load_state(header), doctest::Contains("rank_0.safetensors' has checksum"));
  const fs::path manifest = broken("manifest");
  flip_byte(manifest / "manifest.json", 3);
  CHECK_THROWS_WITH(acc.load_state(manifest), doctest::Contains("manifest.json"));
  const fs::path missing = broken("missing");
  fs::remove(missing / "manifest.json");
  CHECK_THROWS_WITH(acc.load_state(missing), doctest::Contains("save did not complete"));
  CHECK(accel::state::parameter_digest(*net) == before);
  // The good one still loads, and brings the saved parameters back.
  acc.load_state(good);
  CHECK(accel::state::parameter_digest(*net) != before);
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: a mismatched model or optimizer is refused, naming what differs") {
  const fs::path folder = fresh_folder("mismatch");
  {
    Strategy acc;
    Net net;
    torch::optim::Adam adam(net->parameters(), 0.01);
    auto [model, optimizer] = acc.prepare(net, adam);
    acc.save_state(folder / "c");
  }
  Strategy acc;
  auto other = torch::nn::Sequential(torch::nn::Linear(3, 8), torch::nn::Linear(8, 1));
  torch::optim::Adam adam(other->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(other, adam);
  CHECK_THROWS_WITH(acc.load_state(folder / "c"), doctest::Contains("missing 4: \"0.weight\""));
  Strategy acc2;
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model2, optimizer2] = acc2.prepare(net, sgd);
  CHECK_THROWS_WITH(acc2.load_state(folder / "c"),
                    doctest::Contains("is torch::optim::Adam, the prepared one is torch::optim::SGD"));
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: save_model writes safetensors that load_model reads back") {
  const fs::path folder = fresh_folder("model");
  accel::Accelerator<accel::Ddp> acc;
  Net net;
  auto model = acc.prepare(net);
  acc.save_model(model, folder / "one");
  CHECK(fs::exists(folder / "one" / "model.safetensors"));
  acc.save_model(model, folder / "split", 64);  // every tensor a file of its own
  CHECK(fs::exists(folder / "split" / "model.safetensors.index.json"));
  Net other;
  auto loaded = acc.prepare(other);
  acc.load_model(loaded, folder / "split");
  CHECK(accel::state::parameter_digest(*other) == accel::state::parameter_digest(*net));
  // A truncated weights file is refused, naming it, and the model keeps its weights.
  fs::copy(folder / "one", folder / "truncated", fs::copy_options::recursive);
  fs::resize_file(folder / "truncated" / "model.safetensors",
                  fs::file_size(folder / "truncated" / "model.safetensors") - 4);
  Net third;
  auto third_model = acc.prepare(third);
  const std::uint64_t before = accel::state::parameter_digest(*third);
  CHECK_THROWS_WITH(acc.load_model(third_model, folder / "truncated"),
                    doctest::Contains("model.safetensors"));
  CHECK(accel::state::parameter_digest(*third) == before);
  auto wrong = torch::nn::Sequential(torch::nn::Linear(3, 8));
  auto wrong_model = acc.prepare(wrong);
  CHECK_THROWS_WITH(acc.load_model(wrong_model, folder / "one"), doctest::Contains("unexpected"));
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: a checkpoint folder that cannot be written is refused when the "
          "Accelerator is made") {
  const fs::path folder = fresh_folder("read_only");
  std::ofstream(folder / "a-file") << "not a folder";
  CHECK_THROWS_WITH(accel::Accelerator<accel::Ddp>({.checkpoints = {.directory = folder / "a-file" / "ck"}}),
                    doctest::Contains("is not a folder; choose a folder this user can write"));
  fs::create_directories(folder / "locked");
  fs::permissions(folder / "locked", fs::perms::owner_read | fs::perms::owner_exec |
                                         fs::perms::group_read | fs::perms::group_exec |
                                         fs::perms::others_read | fs::perms::others_exec);
  // As another user (root writes anywhere): the folder exists and is read-only, or it is to be
  // made in a read-only one.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::geteuid() == 0 && ::setuid(65534) != 0) ::_exit(10);
    int refused = 0;
    for (const fs::path& directory : {folder / "locked", folder / "locked" / "ck"}) {
      try {
        accel::Accelerator<accel::Ddp> acc({.checkpoints = {.directory = directory}});
      } catch (const accel::Error& error) {
        refused += std::string(error.what()).find("cannot write") != std::string::npos;
      }
    }
    ::_exit(refused == 2 ? 0 : 11);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  accel::Accelerator<accel::Ddp> fine({.checkpoints = {.directory = folder / "new" / "ck"}});
  CHECK(fs::exists(folder / "new" / "ck" / ".accel-lock"));  // a named folder is made, and locked
  fs::permissions(folder / "locked", fs::perms::owner_all);
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: load_model refuses a lossy dtype conversion unless asked") {
  const fs::path folder = fresh_folder("dtypes");
  accel::Accelerator<accel::Ddp> acc;
  Net net;
  auto model = acc.prepare(net);
  // The model's weights, with fc1.weight replaced by `fc1_weight` (another dtype).
  const auto write_with = [&](const std::string& name, const torch::Tensor& fc1_weight) {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& item : net->named_parameters())
      named.emplace_back(item.key(), item.key() == "fc1.weight" ? fc1_weight : item.value().detach());
    for (const auto& item : net->named_buffers()) named.emplace_back(item.key(), item.value());
    accel::state::save_weights(folder / name, named, 1ULL << 30);
    return folder / name;
  };
  const torch::Tensor weight = net->fc1->weight.detach().clone();
  const std::uint64_t before = accel::state::parameter_digest(*net);
  const fs::path huge = write_with("f64", weight.to(torch::kDouble).index_put_({0, 0}, 1e300));
  const std::string overflow = "'fc1.weight' in '" + huge.string() +
                               "' holds 1 finite Double values beyond the range of the model's "
                               "Float (largest magnitude 1e+300)";
  CHECK_THROWS_WITH(acc.load_model(model, huge), doctest::Contains(overflow.c_str()));
  const fs::path bytes = write_with("u8", torch::ones({8, 3}, torch::kUInt8));
  CHECK_THROWS_WITH(acc.load_model(model, bytes),
                    doctest::Contains("is Byte (integer), the model's is Float (floating-point)"));
  const fs::path flags = write_with("bool", torch::ones({8, 3}, torch::kBool));
  CHECK_THROWS_WITH(acc.load_model(model, flags),
                    doctest::Contains("accel::DtypeConversion::unchecked"));
  CHECK(accel::state::parameter_digest(*net) == before);  // nothing loaded
  // Rounding within floating point is what loading into another precision means: allowed.
  acc.load_model(model, write_with("f64_in_range", weight.to(torch::kDouble)));
  CHECK(torch::equal(net->fc1->weight, weight));
  acc.load_model(model, bytes, true, accel::DtypeConversion::unchecked);  // asked for
  CHECK(torch::equal(net->fc1->weight, torch::ones({8, 3})));
  fs::remove_all(folder);
}

// --- What save_state may delete: only what accel wrote (docs/concepts/checkpoints.md) --------------------

namespace {
std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_text(const fs::path& file, const std::string& text) { std::ofstream(file) << text; }
bool has_staging_leftovers(const fs::path& folder) {
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().filename().string().ends_with(".partial")) return true;
  return false;
}
}  // namespace

TEST_CASE("checkpoint: save_state refuses a folder or file it did not write, and deletes nothing") {
  const fs::path folder = fresh_folder("foreign");
  accel::Options options{.seed = 3};
  options.checkpoints = {.directory = folder / "root"};
  Strategy acc(options);
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);

  // A folder of the user's notes.
  fs::create_directories(folder / "outputs");
  write_text(folder / "outputs" / "notes.txt", "mine");
  CHECK_THROWS_WITH(acc.save_state(folder / "outputs"),
                    doctest::Contains("outputs' exists and is not an accel checkpoint: it has no "
                                      "manifest.json"));
  CHECK(read_text(folder / "outputs" / "notes.txt") == "mine");
  // A file.
  write_text(folder / "file", "data");
  CHECK_THROWS_WITH(acc.save_state(folder / "file"), doctest::Contains("it is not a folder"));
  CHECK(read_text(folder / "file") == "data");
  // The working directory, named as ".".
  const fs::path before = fs::current_path();
  fs::current_path(folder / "outputs");
  CHECK_THROWS_WITH(acc.save_state(fs::path(".")), doctest::Contains("is not an accel checkpoint"));
  fs::current_path(before);
  CHECK(read_text(folder / "outputs" / "notes.txt") == "mine");
  // The checkpoints root, holding automatic checkpoints.
  acc.save_state();
  acc.save_state();
  CHECK_THROWS_WITH(acc.save_state(folder / "root"), doctest::Contains("is not an accel checkpoint"));
  CHECK(fs::exists(folder / "root" / "checkpoint_0" / "manifest.json"));
  CHECK(fs::exists(folder / "root" / "checkpoint_1" / "manifest.json"));
  // A checkpoint the user put a file into is no longer only accel's.
  write_text(folder / "root" / "checkpoint_1" / "eval.txt", "0.93");
  CHECK_THROWS_WITH(acc.save_state(folder / "root" / "checkpoint_1"),
                    doctest::Contains("it holds 'eval.txt', which its manifest does not name"));
  CHECK(read_text(folder / "root" / "checkpoint_1" / "eval.txt") == "0.93");
  // A staging folder's name holding something a save does not write.
  fs::create_directories(folder / ".kept.partial");
  write_text(folder / ".kept.partial" / "draft.txt", "x");
  CHECK_THROWS_WITH(acc.save_state(folder / "kept"), doctest::Contains("accel will not delete it"));
  CHECK(read_text(folder / ".kept.partial" / "draft.txt") == "x");
  CHECK_FALSE(has_staging_leftovers(folder / "root"));
  CHECK_FALSE(has_staging_leftovers(folder / "outputs"));
  CHECK_FALSE(fs::exists(folder / ".outputs.partial"));
  CHECK_FALSE(fs::exists(folder / ".file.partial"));
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: a trailing separator, '.' and a symlink name the same checkpoint") {
  const fs::path folder = fresh_folder("paths");
  Strategy acc({.seed = 4});
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  acc.save_state(fs::path((folder / "ck").string() + "/"));
  CHECK(fs::exists(folder / "ck" / "manifest.json"));
  acc.save_state(fs::path((folder / "ck").string() + "/"));  // replaces its own checkpoint
  const fs::path before = fs::current_path();
  fs::current_path(folder / "ck");
  acc.save_state(fs::path("."));
  fs::current_path(before);
  fs::create_directory_symlink(folder / "ck", folder / "link");
  acc.save_state(folder / "link");
  CHECK(fs::is_symlink(folder / "link"));
  CHECK(fs::exists(folder / "link" / "manifest.json"));
  CHECK_FALSE(has_staging_leftovers(folder));
  acc.load_state(fs::path((folder / "ck").string() + "/"));
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: one run per checkpoint folder, taken when the Accelerator is made, a dead "
          "holder's lock taken over") {
  const fs::path root = fresh_folder("lock");
  const fs::path work = fresh_folder("lock_default");  // where ./checkpoints, the default, is
  int go[2];
  REQUIRE(::pipe(go) == 0);
  int held[2];
  REQUIRE(::pipe(held) == 0);
  const pid_t other_run = ::fork();
  REQUIRE(other_run >= 0);
  if (other_run == 0) {  // another job's main process: takes the folders and waits
    accel::state::hold_folder_for_this_run(accel::state::resolved_folder(root), "test");
    accel::state::hold_folder_for_this_run(accel::state::resolved_folder(work / "checkpoints"),
                                           "test");
    char c = 1;
    (void)!::write(held[1], &c, 1);
    (void)!::read(go[0], &c, 1);
    ::_exit(0);
  }
  char c = 0;
  REQUIRE(::read(held[0], &c, 1) == 1);
  accel::Options options{.seed = 5};
  options.checkpoints = {.directory = root};
  // A folder the program named: refused as the Accelerator is made, before any training (the
  // second of two runs on one folder used to train to its end and fail at its first save).
  CHECK_THROWS_WITH([&] { Strategy refused(options); }(),
                    doctest::Contains(fmt::format("accel: Options::checkpoints.directory: the "
                                                  "checkpoint folder '{}' belongs to another run "
                                                  "that is still running (pid {} on ",
                                                  accel::state::resolved_folder(root).string(),
                                                  other_run)
                                          .c_str()));
  CHECK_FALSE(fs::exists(root / "checkpoint_0"));
  {
    // The default ./checkpoints is taken at the first save or resume: a program that never
    // saves does not contend for it.
    const fs::path before = fs::current_path();
    fs::current_path(work);
    Strategy acc({.seed = 5});
    Net net;
    torch::optim::SGD sgd(net->parameters(), 0.1);
    auto [model, optimizer] = acc.prepare(net, sgd);
    CHECK_THROWS_WITH(acc.save_state(), doctest::Contains("save_state: the checkpoint folder"));
    CHECK_THROWS_WITH(acc.load_state(), doctest::Contains("belongs to another run"));
    fs::current_path(before);
  }
  // The other run dies without a word (SIGKILL): the kernel drops its lock.
  ::kill(other_run, SIGKILL);
  int status = 0;
  ::waitpid(other_run, &status, 0);
  Strategy acc(options);
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  CHECK(acc.save_state() == root / "checkpoint_0");
  CHECK(acc.load_state() == root / "checkpoint_0");
  for (int fd : {go[0], go[1], held[0], held[1]}) ::close(fd);
  fs::remove_all(root);
  fs::remove_all(work);
}

// Runs that follow each other on one folder (the lock keeps apart only runs that overlap): every
// manifest names its run and the run it had resumed from, and load_state() without a folder
// takes the newest checkpoint only when its run continued the one before it there. The other
// runs' manifests are written here as such a run would write them (format 1: no checksum).
TEST_CASE("checkpoint: a resume refuses the newest checkpoint when a run that did not continue "
          "this folder's wrote it") {
  const fs::path root = fresh_folder("runs");
  accel::Options options{.seed = 5};
  options.checkpoints = {.directory = root};
  Strategy acc(options);
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  CHECK(acc.save_state() == root / "checkpoint_0");
  CHECK(acc.save_state() == root / "checkpoint_1");
  CHECK(acc.load_state() == root / "checkpoint_1");  // this run's own
  const auto saved = nlohmann::json::parse(read_text(root / "checkpoint_1" / "manifest.json"));
  REQUIRE(saved.contains("run"));
  const std::string this_run = saved["run"]["id"].get<std::string>();
  CHECK(this_run.size() == 16);
  auto written_by = [&](const std::string& name, const std::string& run,
                        const std::string& resumed_from) {
    fs::copy(root / "checkpoint_1", root / name, fs::copy_options::recursive);
    auto manifest = saved;
    manifest["format_version"] = 1;
    manifest["run"] = {{"id", run}, {"resumed_from", resumed_from}};
    write_text(root / name / "manifest.json", manifest.dump(1));
  };
  // Another program started afresh on the same folder after this one's last save.
  written_by("checkpoint_2", "0123456789abcdef", "");
  written_by("checkpoint_3", "0123456789abcdef", "");
  CHECK_THROWS_WITH(acc.load_state(),
                    doctest::Contains(fmt::format("accel: load_state: two runs have written into "
                                                  "'{}': its newest checkpoint 'checkpoint_3' is "
                                                  "run 0123456789abcdef's, which started afresh, "
                                                  "while 'checkpoint_1' before it is run {}'s",
                                                  root.string(), this_run)
                                          .c_str()));
  // One that had resumed from a checkpoint elsewhere is refused too.
  written_by("checkpoint_4", "0123456789abcdee", "fedcba9876543210");
  CHECK_THROWS_WITH(acc.load_state(),
                    doctest::Contains("which had resumed from run fedcba9876543210, none of whose "
                                      "checkpoints is here"));
  // Named, any checkpoint loads.
  CHECK(acc.load_state(root / "checkpoint_3") == root / "checkpoint_3");
  // A run that resumed from this folder's run continues it, and a run that resumed from it in
  // turn continues that one.
  for (const char* name : {"checkpoint_2", "checkpoint_3", "checkpoint_4"}) fs::remove_all(root / name);
  written_by("checkpoint_5", "00000000000000aa", this_run);
  CHECK(acc.load_state() == root / "checkpoint_5");
  CHECK(acc.save_state() == root / "checkpoint_6");
  const auto mine = nlohmann::json::parse(read_text(root / "checkpoint_6" / "manifest.json"));
  CHECK(mine["run"]["id"] == this_run);
  CHECK(mine["run"]["resumed_from"] == "00000000000000aa");
  CHECK(acc.load_state() == root / "checkpoint_6");
  fs::remove_all(root);
}

// A FIFO in place of a weights file blocked every rank in open(), forever; a device was read as
// an empty file. Both are refused, naming the path, before open() can wait (in a child process,
// with an alarm: a regression must fail the test, not hang it).
TEST_CASE("checkpoint: load_model refuses a FIFO or a device in place of a weights file, at once") {
  const fs::path folder = fresh_folder("fifo");
  accel::Accelerator<accel::Ddp> acc;
  Net net;
  auto model = acc.prepare(net);
  acc.save_model(model, folder / "sharded", 64);
  fs::create_directories(folder / "fifo");
  REQUIRE(::mkfifo((folder / "fifo" / "model.safetensors").c_str(), 0644) == 0);
  fs::create_directories(folder / "device");
  fs::create_symlink("/dev/zero", folder / "device" / "model.safetensors");
  fs::copy(folder / "sharded", folder / "fifo_index", fs::copy_options::recursive);
  fs::remove(folder / "fifo_index" / "model.safetensors.index.json");
  REQUIRE(::mkfifo((folder / "fifo_index" / "model.safetensors.index.json").c_str(), 0644) == 0);
  fs::copy(folder / "sharded", folder / "fifo_shard", fs::copy_options::recursive);
  fs::path shard;
  for (const auto& entry : fs::directory_iterator(folder / "fifo_shard"))
    if (entry.path().filename().string().starts_with("model-00001-of-")) shard = entry.path();
  REQUIRE_FALSE(shard.empty());
  fs::remove(shard);
  REQUIRE(::mkfifo(shard.c_str(), 0644) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::alarm(60);
    int refused = 0;
    const std::vector<std::tuple<fs::path, std::string>> cases{
        {folder / "fifo" / "model.safetensors", "a FIFO (named pipe)"},
        {folder / "device" / "model.safetensors", "a character device"},
        {folder / "fifo_index" / "model.safetensors.index.json", "a FIFO (named pipe)"},
        {shard, "a FIFO (named pipe)"}};
    for (const auto& [file, kind] : cases) {
      try {
        acc.load_model(model, file.parent_path());
        std::fprintf(stderr, "load_model(%s) was not refused\n", file.c_str());
      } catch (const accel::Error& error) {
        const std::string expected =
            fmt::format("'{}' is not a regular file but {}", file.string(), kind);
        const bool named = std::string(error.what()).find(expected) != std::string::npos;
        if (!named) std::fprintf(stderr, "expected \"%s\" in: %s\n", expected.c_str(), error.what());
        refused += named;
      }
    }
    ::_exit(refused == 4 ? 0 : 11);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));  // not killed by the alarm: nothing waited in open()
  CHECK(WEXITSTATUS(status) == 0);
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: a save that cannot write leaves no partial files and the old one whole") {
  const fs::path folder = fresh_folder("full");
  Strategy acc({.seed = 6});
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  acc.save_state(folder / "ck");
  const std::string manifest = read_text(folder / "ck" / "manifest.json");
  // A file size limit stands in for a full disk: the rank file's write fails part way.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 1024;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  CHECK_THROWS_WITH(acc.save_state(folder / "ck"), doctest::Contains("File too large"));
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
  std::signal(SIGXFSZ, previous);
  CHECK_FALSE(fs::exists(folder / ".ck.partial"));
  CHECK(read_text(folder / "ck" / "manifest.json") == manifest);
  acc.load_state(folder / "ck");
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: the manifest's own checksum catches a changed step count, a missing rank "
          "file is named") {
  const fs::path folder = fresh_folder("manifest_sum");
  Strategy acc({.seed = 7});
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  acc.save_state(folder / "good");
  fs::copy(folder / "good", folder / "edited", fs::copy_options::recursive);
  std::string text = read_text(folder / "edited" / "manifest.json");
  const auto at = text.find("\"completed_steps\": 0");
  REQUIRE(at != std::string::npos);
  text.replace(at, 20, "\"completed_steps\": 8");
  write_text(folder / "edited" / "manifest.json", text);
  CHECK_THROWS_WITH(acc.load_state(folder / "edited"), doctest::Contains("the manifest is corrupt"));
  fs::copy(folder / "good", folder / "missing", fs::copy_options::recursive);
  fs::remove(folder / "missing" / "rank_0.safetensors");
  CHECK_THROWS_WITH(acc.load_state(folder / "missing"),
                    doctest::Contains(("accel: load_state: '" +
                                       (folder / "missing" / "rank_0.safetensors").string() +
                                       "' is missing")
                                          .c_str()));
  acc.load_state(folder / "good");
  fs::remove_all(folder);
}

TEST_CASE("checkpoint: each policy goes by one full name, so a mid-window checkpoint tells "
          "Fsdp<ShardGradOp> from Fsdp<FullShard>") {
  using ShardGradOp = accel::Accelerator<accel::Fsdp<accel::ShardGradOp>, accel::Fp32, accel::GradAccum<2>>;
  using FullShard = accel::Accelerator<accel::Fsdp<accel::FullShard>, accel::Fp32, accel::GradAccum<2>>;
  using Fp16Wire = accel::Accelerator<accel::DdpWith<accel::CompressFp16>>;
  using Bf16Wire = accel::Accelerator<accel::DdpWith<accel::CompressBf16>>;
  using Both = accel::Variants<ShardGradOp, FullShard, Fp16Wire, Bf16Wire>;
  CHECK(Both::names() == std::vector<std::string>{"Fsdp<ShardGradOp>,Fp32,2", "Fsdp<FullShard>,Fp32,2",
                                                  "DdpWith<CompressFp16>,Fp32,1",
                                                  "DdpWith<CompressBf16>,Fp32,1"});
  CHECK(Both::run("DdpWith<CompressBf16>,Fp32,1", [](auto variant) {
          return std::string(decltype(variant)::type::parallelism_policy::name);
        }) == "DdpWith<CompressBf16>");

  const fs::path folder = fresh_folder("full_names");
  {
    ShardGradOp acc({.seed = 1});
    Net net;
    torch::optim::SGD sgd(net->parameters(), 0.1);
    auto [model, optimizer] = acc.prepare(net, sgd);
    acc.backward(model(torch::ones({2, 3})).sum());  // micro-step 1 of 2: mid-window
    acc.save_state(folder / "mid");
  }
  CHECK(read_text(folder / "mid" / "manifest.json").find("\"parallelism\": \"Fsdp<ShardGradOp>\"") !=
        std::string::npos);
  FullShard acc({.seed = 1});
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  CHECK_THROWS_WITH(acc.load_state(folder / "mid"),
                    doctest::Contains("saved mid-window (micro-step 1 of 2) by Fsdp<ShardGradOp> "
                                      "on 1 processes with GradAccum<2>; its collected gradients "
                                      "belong to that layout, so load it with the same, not "
                                      "Fsdp<FullShard> on 1 processes"));
  fs::remove_all(folder);
}

// --- The slice catalogue (state/slice_catalog.hpp): any range of a tensor's flattened elements,
// from the slices of several rank files, as a checkpoint saved at one world size is read at
// another; an element no slice holds, or one two slices hold, is found and named.
namespace {

// A rank file holding elements [begin, begin + count) of `tensor`, whose element i is i.
accel::state::safetensors::File rank_file(const std::string& tensor, std::int64_t begin,
                                          std::int64_t count) {
  namespace st = accel::state::safetensors;
  const torch::Tensor values = torch::arange(begin, begin + count, torch::kFloat);
  return st::File::from_bytes(st::serialize({{accel::state::slice_name(tensor, begin), values}}),
                              fmt::format("rank{}.safetensors", begin));
}

// A catalogue of `tensor` cut into the slices [begin, begin + count) given.
accel::state::SliceCatalog catalog_of(
    const std::string& tensor, std::initializer_list<std::pair<std::int64_t, std::int64_t>> cuts) {
  accel::state::SliceCatalog catalog;
  for (const auto& [begin, count] : cuts)
    catalog.add(rank_file(tensor, begin, count), fmt::format("rank{}.safetensors", begin));
  return catalog;
}

std::string message_of(const std::function<void()>& op) {
  try {
    op();
  } catch (const accel::Error& error) {
    return error.what();
  }
  return "no error";
}

bool holds_range(const torch::Tensor& read, std::int64_t begin, std::int64_t count) {
  return torch::equal(read, torch::arange(begin, begin + count, torch::kFloat));
}

}  // namespace

TEST_CASE("slice catalogue: a range inside one slice, across two, and the whole tensor") {
  const auto catalog = catalog_of("w", {{0, 6}, {6, 4}});
  CHECK(holds_range(catalog.read("w", 2, 3, torch::kFloat), 2, 3));  // inside the first
  CHECK(holds_range(catalog.read("w", 7, 3, torch::kFloat), 7, 3));  // inside the second
  CHECK(holds_range(catalog.read("w", 4, 4, torch::kFloat), 4, 4));  // across both
  CHECK(holds_range(catalog.read("w", 0, 10, torch::kFloat), 0, 10));
  const auto coverage = catalog.coverage("w");
  CHECK(coverage.problem.empty());
  CHECK(coverage.end == 10);
}

TEST_CASE("slice catalogue: an element no slice holds is refused, even a single one") {
  const auto catalog = catalog_of("h", {{0, 3}, {4, 2}});
  CHECK(message_of([&] { (void)catalog.read("h", 0, 6, torch::kFloat); })
            .find("accel: checkpoint: elements 3..5 of 'h' are in none of its rank files") == 0);
  CHECK(message_of([&] { (void)catalog.read("h", 2, 3, torch::kFloat); })
            .find("elements 3..4 of 'h'") != std::string::npos);
  CHECK(holds_range(catalog.read("h", 4, 2, torch::kFloat), 4, 2));
  CHECK(catalog.coverage("h").problem == "elements 3..3 of 'h' are in no rank file");
  // The first element of a read, the rest held.
  CHECK(message_of([&] { (void)catalog.read("h", 3, 3, torch::kFloat); })
            .find("elements 3..5 of 'h'") != std::string::npos);
}

TEST_CASE("slice catalogue: slices that overlap are named by the coverage check") {
  const auto catalog = catalog_of("o", {{0, 4}, {2, 4}});
  CHECK(catalog.coverage("o").problem ==
        "'o' holds elements from 2 twice (rank2.safetensors overlaps the slice before it)");
}

// A tensor-parallel slice of a RowParallelLinear's weight is a block of its columns: rows of the
// full tensor `stride` apart, stored as "<tensor>@<begin>:<stride>" [rows, width]. Here a [3, 4]
// tensor whose element i is i, in two column halves.
namespace {

accel::state::safetensors::File block_file(std::int64_t first_column) {
  namespace st = accel::state::safetensors;
  const torch::Tensor values =
      torch::arange(12, torch::kFloat).view({3, 4}).narrow(1, first_column, 2).contiguous();
  return st::File::from_bytes(
      st::serialize({{accel::state::block_name("t", first_column, 4), values}}),
      fmt::format("rank{}.safetensors", first_column));
}

bool holds(const torch::Tensor& read, std::vector<float> values) {
  return torch::equal(read, torch::tensor(values));
}

}  // namespace

TEST_CASE("slice catalogue: blocks of columns read as any range, whole or placed") {
  accel::state::SliceCatalog catalog;
  catalog.add(block_file(0), "rank0.safetensors");
  catalog.add(block_file(2), "rank2.safetensors");
  CHECK(holds_range(catalog.read("t", 0, 12, torch::kFloat), 0, 12));  // one process's read
  CHECK(holds_range(catalog.read("t", 3, 6, torch::kFloat), 3, 6));    // a Zero3 piece's
  CHECK(holds(catalog.read_rows("t", 1, 3, 2, 4, torch::kFloat), {1, 2, 5, 6, 9, 10}));
  CHECK(catalog.coverage("t").problem.empty());
  CHECK(catalog.coverage("t").end == 12);
  // Rank 1 of 2's columns (2 and 3), elements 1..4 of its [3, 2] slice: the end of a row, a
  // whole row, the start of one.
  const accel::parallel::Placement columns{.width = 2, .stride = 4, .offset = 2};
  const auto blocks = accel::state::components::full_blocks(columns, 1, 4);
  CHECK(blocks.size() == 3);
  CHECK(holds(accel::state::components::read_placed(catalog, "t", 1, 4, columns, torch::kFloat),
              {3, 6, 7, 10}));
  accel::state::components::NamedTensors named;
  accel::state::components::add_placed(named, "t", 0, torch::tensor({2.f, 3.f, 6.f, 7.f, 10.f, 11.f}),
                                       columns);
  REQUIRE(named.size() == 1);
  CHECK(named[0].first == "t@2:4");
  CHECK(named[0].second.sizes() == torch::IntArrayRef({3, 2}));
}

TEST_CASE("slice catalogue: a block of columns missing is named, read or checked") {
  accel::state::SliceCatalog catalog;
  catalog.add(block_file(0), "rank0.safetensors");
  CHECK(message_of([&] { (void)catalog.read("t", 0, 12, torch::kFloat); })
            .find("accel: checkpoint: elements 2..11 of 't' are in none of its rank files") == 0);
  CHECK(catalog.coverage("t").problem == "elements 2..3 of 't' are in no rank file");
  CHECK(holds(catalog.read_rows("t", 0, 3, 2, 4, torch::kFloat), {0, 1, 4, 5, 8, 9}));
}

}  // namespace unit_checkpoint
