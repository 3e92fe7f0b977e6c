// save_state / load_state on one process: exact continuation (mid-epoch, mid-window, with a
// scheduler, a shuffled loader and dropout), crash safety of the folder protocol, automatic
// naming and its limit, and staged loading: a corrupt checkpoint changes nothing.
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>
#include <doctest/doctest.h>

#include <cstdio>
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
