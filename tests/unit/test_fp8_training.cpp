// Fp8 training (precision/fp8.hpp, fp8_linear.hpp): the fp8 Linear's arithmetic against the
// recipe's formulas, which layers prepare() reroutes and which it leaves in bf16, the scales
// after each window's step, training next to fp32, the state a checkpoint keeps.
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>
#include <accel/memory.hpp>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "../skip.hpp"
#include "helpers.hpp"

using accel::testing::internals;

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_fp8_training {

namespace {

using accel::precision::DelayedScaling;
using accel::precision::Float8Format;
using accel::precision::Fp8LinearScaling;
using accel::precision::round_to_float8;

float amax_of(const torch::Tensor& t) { return t.abs().max().item<float>(); }

// A model with each kind of Linear: two Sequential children (one fitting fp8's multiples of 16,
// one not), one plain Linear its forward calls itself, one accel::Fp8Linear.
struct MixedImpl : torch::nn::Module {
  accel::Fp8Linear declared{nullptr};
  torch::nn::Linear direct{nullptr};
  torch::nn::Sequential head{nullptr};
  MixedImpl() {
    declared = register_module("declared", accel::Fp8Linear(32, 32));
    direct = register_module("direct", torch::nn::Linear(32, 32));
    head = register_module("head", torch::nn::Sequential(torch::nn::Linear(32, 16), torch::nn::Tanh(),
                                                         torch::nn::Linear(16, 1)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return head->forward(torch::tanh(direct(torch::tanh(declared(x)))));
  }
};
TORCH_MODULE(Mixed);

std::vector<std::string> parameter_names(torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

torch::nn::Sequential regression_model() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(16, 32), torch::nn::Tanh(), torch::nn::Linear(32, 16),
                               torch::nn::Tanh(), torch::nn::Linear(16, 1));
}

// A regression model, its SGD and loader prepared by `accelerator`, all kept alive as long as
// the Accelerator points at them (a checkpoint saves them).
template <class Accel>
struct Training {
  torch::nn::Sequential net = regression_model();
  torch::optim::SGD sgd{net->parameters(), 0.05};
  accel::DataLoader<accel_test::Regression> loader{accel_test::Regression(64, 16), {.batch_size = 8}};
  Accel& accelerator;
  decltype(accelerator.prepare(net, sgd, loader)) prepared;

  explicit Training(Accel& a) : accelerator(a), prepared(a.prepare(net, sgd, loader)) {}

  // `steps` optimizer steps (0: one forward and backward, no step).
  void run(int steps) {
    auto& [model, optimizer, batches] = prepared;
    int done = 0;
    for (const auto& batch : batches) {
      accelerator.backward(torch::mse_loss(model(batch.x), batch.y));
      if (accelerator.sync_gradients() && ++done > steps) break;
      optimizer.step();
      optimizer.zero_grad();
    }
  }
};

template <class Accel>
torch::nn::Sequential trained(Accel& accelerator, int steps) {
  Training<Accel> training(accelerator);
  training.run(steps);
  return training.net;
}

accel::Options history_of(int steps) {
  accel::Options options;
  options.fp8.amax_history_len = steps;
  return options;
}

}  // namespace

TEST_CASE("fp8_linear: forward and backward are the recipe's, through each tensor's scale") {
  torch::manual_seed(11);
  const auto scaling = c10::make_intrusive<Fp8LinearScaling>(accel::Fp8Options{.amax_history_len = 4});
  const torch::Tensor x = torch::randn({6, 32}) * 3, w = torch::randn({16, 32}) * 0.2,
                      b = torch::randn({16});
  // A first step records the amaxes (scale 1 until then); update() turns them into scales.
  {
    const auto xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
    accel::precision::fp8_linear(xr, wr, b, scaling).sum().backward();
  }
  CHECK(scaling->input.step_amax() == amax_of(x));
  CHECK(scaling->weight.step_amax() == amax_of(w));
  CHECK(scaling->grad_output.step_amax() == 1.0f);  // d(sum)/dy
  for (DelayedScaling* t : {&scaling->input, &scaling->weight, &scaling->grad_output}) t->update();
  const float sx = scaling->input.scale(), sw = scaling->weight.scale(), sg = scaling->grad_output.scale();
  CHECK(sx == doctest::Approx(448.0 / amax_of(x)).epsilon(1e-6));
  CHECK(sg == doctest::Approx(57344.0).epsilon(1e-6));

  const auto xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_(),
             br = b.clone().requires_grad_();
  const torch::Tensor y = accel::precision::fp8_linear(xr, wr, br, scaling);
  const torch::Tensor xq = round_to_float8(x * sx, Float8Format::e4m3) / sx;
  const torch::Tensor wq = round_to_float8(w * sw, Float8Format::e4m3) / sw;
  CHECK(accel_test::dtype_name(y) == "Float");  // no autocast: the input's dtype
  CHECK(torch::allclose(y, xq.mm(wq.t()) + b, 1e-5, 1e-5));
  // fp8's relative step is 2^-4 at most: near fp32's own product, not equal to it.
  const torch::Tensor exact = x.mm(w.t()) + b;
  CHECK((y - exact).abs().max().item<float>() < 0.15f * exact.abs().max().item<float>());
  CHECK_FALSE(torch::allclose(y, exact, 1e-4, 1e-4));

  const torch::Tensor dy = torch::randn({6, 16}) * 1e-3;
  y.backward(dy);
  const torch::Tensor g = round_to_float8(dy * sg, Float8Format::e5m2) / sg;
  CHECK(torch::allclose(xr.grad(), g.mm(wq), 1e-5, 1e-7));
  CHECK(torch::allclose(wr.grad(), g.t().mm(xq), 1e-5, 1e-7));
  CHECK(torch::allclose(br.grad(), dy.sum(0), 1e-6, 1e-8));  // the bias: dy unrounded

  // Under autocast the output is in autocast's dtype; the arithmetic stays the function's own.
  {
    accel::precision::Autocast<accel::Bf16> autocast(torch::Device(torch::kCPU));
    const torch::Tensor yb = accel::precision::fp8_linear(x, w, b, scaling);
    CHECK(accel_test::dtype_name(yb) == "BFloat16");
    CHECK(torch::equal(yb, y.detach().to(torch::kBFloat16)));
  }
  // Evaluation leaves the amaxes alone.
  for (DelayedScaling* t : {&scaling->input, &scaling->weight, &scaling->grad_output}) t->update();
  {
    torch::NoGradGuard no_grad;
    accel::precision::fp8_linear(x * 100, w, b, scaling);
  }
  CHECK(scaling->input.step_amax() == 0.0f);
}

// A layer without bias (LinearOptions::bias(false), and a split row layer's partial product):
// the same arithmetic, and no bias gradient. Before, libtorch 1.13's autograd function refused
// the undefined bias ("tensor does not have a device").
TEST_CASE("fp8_linear: a layer without bias") {
  torch::manual_seed(12);
  const auto scaling = c10::make_intrusive<Fp8LinearScaling>(accel::Fp8Options{.amax_history_len = 4});
  const torch::Tensor x = torch::randn({6, 32}), w = torch::randn({16, 32}) * 0.2;
  const auto xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
  const torch::Tensor y = accel::precision::fp8_linear(xr, wr, torch::Tensor(), scaling);
  const torch::Tensor wq = round_to_float8(w, Float8Format::e4m3);  // scale 1 before an update
  CHECK(torch::allclose(y, round_to_float8(x, Float8Format::e4m3).mm(wq.t()), 1e-5, 1e-5));
  y.sum().backward();
  CHECK(wr.grad().sizes() == w.sizes());
  CHECK(xr.grad().sizes() == x.sizes());
  // Through an Accelerator: a Sequential's Linear without bias computes in fp8 and trains.
  accel::Accelerator<accel::Ddp, accel::Fp8> acc;
  const torch::nn::Linear linear(torch::nn::LinearOptions(32, 16).bias(false));
  torch::nn::Sequential net(linear);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  CHECK(internals(acc).precision().fp8_layers() == std::vector<std::string>{"0"});
  acc.backward(model(x).pow(2).mean());
  optimizer.step();
  CHECK(linear->weight.grad().defined());
}

// Where a GPU is present: the three products through at::_scaled_mm give what the emulation
// gives on the CPU (fp32 sums of exact fp8 products, up to their order). The device check
// (scripts/device-check.sh) sets ACCEL_EXPECT_FP8_TENSOR_CORES on a GPU that has them.
// Skipped (ctest's skip, not a pass) without a CUDA device.
TEST_CASE("fp8_linear on CUDA: fp8 tensor cores (at::_scaled_mm) compute the emulated products") {
  if (!torch::cuda::is_available()) {
    accel_test::skip("no CUDA device");
    return;
  }
  const torch::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(12);
  const torch::Tensor x = torch::randn({32, 32}) * 3, w = torch::randn({16, 32}) * 0.2,
                      b = torch::randn({16}), dy = torch::randn({32, 16}) * 1e-3;
  struct Result {
    torch::Tensor y, dx, dw;
  };
  const auto run = [&](const torch::Device& device, const c10::intrusive_ptr<Fp8LinearScaling>& scaling) {
    const auto xr = x.to(device).requires_grad_(), wr = w.to(device).requires_grad_();
    const torch::Tensor y = accel::precision::fp8_linear(xr, wr, b.to(device), scaling);
    y.backward(dy.to(device));
    return Result{y.detach().cpu(), xr.grad().cpu(), wr.grad().cpu()};
  };
  const accel::Fp8Options options{.amax_history_len = 4};
  const auto on_cpu = c10::make_intrusive<Fp8LinearScaling>(options);
  const auto on_gpu = c10::make_intrusive<Fp8LinearScaling>(options);
  for (const auto& scaling : {on_cpu, on_gpu}) {  // the amaxes of a first step become the scales
    run(scaling == on_cpu ? torch::Device(torch::kCPU) : cuda, scaling);
    for (DelayedScaling* t : {&scaling->input, &scaling->weight, &scaling->grad_output}) t->update();
  }
  CHECK(on_cpu->input.scale() == on_gpu->input.scale());
  const std::uint64_t before = accel::precision::fp8_tensor_core_matmuls();
  const Result emulated = run(torch::Device(torch::kCPU), on_cpu);
  const Result gpu = run(cuda, on_gpu);
  const std::uint64_t on_tensor_cores = accel::precision::fp8_tensor_core_matmuls() - before;
  MESSAGE("fp8 products on tensor cores: " << on_tensor_cores << " of 3");
  CHECK(torch::allclose(gpu.y, emulated.y, 1e-5, 1e-5));
  CHECK(torch::allclose(gpu.dx, emulated.dx, 1e-5, 1e-8));
  CHECK(torch::allclose(gpu.dw, emulated.dw, 1e-5, 1e-8));
  if (std::getenv("ACCEL_EXPECT_FP8_TENSOR_CORES") != nullptr) CHECK(on_tensor_cores == 3);
}

TEST_CASE("Fp8: prepare() reroutes the Linear layers it can, lists the others, keeps every name") {
  accel::Accelerator<accel::Ddp, accel::Fp8> accelerator;
  Mixed net;
  const auto names_before = parameter_names(*net);
  auto model = accelerator.prepare(net);
  CHECK(internals(accelerator).precision().fp8_layers() == std::vector<std::string>{"declared", "head.0"});
  CHECK(net->declared->computes_in_fp8());
  CHECK(parameter_names(*net) == names_before);
  const torch::Tensor x = torch::randn({4, 32});
  const torch::Tensor out = model(x);
  CHECK(accel_test::dtype_name(out) == "Float");
  // Each fp8 layer saw its input (recorded: the forward builds a graph).
  CHECK(internals(accelerator).precision().scaling(0).input.step_amax() == amax_of(x));
  CHECK(internals(accelerator).precision().scaling(1).input.step_amax() > 0.0f);

  // Outside an Fp8 Accelerator, accel::Fp8Linear is torch's Linear.
  accel::Fp8Linear plain(8, 16);
  const torch::Tensor z = torch::randn({2, 8});
  CHECK_FALSE(plain->computes_in_fp8());
  CHECK(torch::equal(plain(z), torch::nn::functional::linear(z, plain->weight, plain->bias)));
}

TEST_CASE("Fp8: the scales move once per window, after its step, to FP8_MAX / amax") {
  accel::Accelerator<accel::Ddp, accel::Fp8, accel::GradAccum<2>> accelerator;
  auto net = regression_model();
  torch::optim::SGD sgd(net->parameters(), 0.05);
  accel::DataLoader loader(accel_test::Regression(64, 16), {.batch_size = 8});
  auto [model, optimizer, batches] = accelerator.prepare(net, sgd, loader);
  const auto& precision = internals(accelerator).precision();
  REQUIRE(precision.fp8_layers() == std::vector<std::string>{"0", "2"});
  auto it = batches.begin();
  for (int micro = 0; micro < 2; ++micro, ++it) {
    accelerator.backward(torch::mse_loss(model(it->x), it->y));
    optimizer.step();  // a no-op on the first micro-step
    optimizer.zero_grad();
    if (micro == 0) CHECK(precision.scaling(0).weight.scale() == 1.0f);
  }
  // The weight did not change between the window's micro-steps; its amax is the weight's.
  const float weight_amax = precision.scaling(0).weight.state().amax_history.at(1);
  CHECK(weight_amax > 0.0f);
  CHECK(precision.scaling(0).weight.scale() == doctest::Approx(448.0 / weight_amax).epsilon(1e-6));
  CHECK(precision.scaling(0).grad_output.scale() > 1.0f);
  CHECK(precision.scaling(0).weight.step_amax() == 0.0f);  // the next window begins
}

TEST_CASE("Fp8 trains next to Fp32, and checkpointed activations change nothing") {
  accel::Accelerator<accel::Ddp, accel::Fp32> fp32_accelerator;
  auto fp32 = trained(fp32_accelerator, 6);
  accel::Accelerator<accel::Ddp, accel::Bf16> bf16_accelerator;
  auto bf16 = trained(bf16_accelerator, 6);
  accel::Accelerator<accel::Ddp, accel::Fp8> fp8_accelerator;
  auto fp8 = trained(fp8_accelerator, 6);
  // Against fp32: more than bf16's rounding alone (the fp8 layers round to 4 and 3 significant
  // bits), within what those roundings explain (measured 0.045 after 6 steps; bf16 0.004).
  const double fp8_difference = accel_test::max_relative_difference(*fp8, *fp32);
  const double bf16_difference = accel_test::max_relative_difference(*bf16, *fp32);
  MESSAGE("after 6 steps, against Fp32: Fp8 " << fp8_difference << ", Bf16 " << bf16_difference);
  CHECK(fp8_difference > 2 * bf16_difference);
  CHECK(fp8_difference < 0.1);

  // The checkpoint wraps the fp8 layer's entry (found by position); the recompute runs it again.
  accel::Options options;
  options.activation_checkpointing = accel::memory::checkpoint_sequential_children;
  accel::Accelerator<accel::Ddp, accel::Fp8> checkpointing(options);
  auto checkpointed = trained(checkpointing, 6);
  CHECK(accel::state::parameter_digest(*checkpointed) == accel::state::parameter_digest(*fp8));
}

TEST_CASE("Fp8: the scales are state, saved and loaded with a checkpoint, refused when foreign") {
  namespace fs = std::filesystem;
  const fs::path folder = fs::temp_directory_path() / fmt::format("accel_fp8_{}", ::getpid());
  fs::remove_all(folder);
  accel::Accelerator<accel::Ddp, accel::Fp8> first(history_of(8));
  Training training(first);
  training.run(3);
  first.save_state(folder / "fp8");
  const auto saved = internals(first).precision_state();
  REQUIRE(saved.layers.size() == 2);
  CHECK(saved.layers[1].layer == "2");
  CHECK(saved.layers[0].weight.amax_history.size() == 8);

  accel::Accelerator<accel::Ddp, accel::Fp8> second(history_of(8));
  Training resumed(second);
  resumed.run(0);
  CHECK(internals(second).precision().scaling(0).weight.scale() != saved.layers[0].weight.scale);
  second.load_state(folder / "fp8");
  const auto loaded = internals(second).precision_state();
  CHECK(loaded.layers[0].weight.scale == saved.layers[0].weight.scale);
  CHECK(loaded.layers[1].grad_output.amax_history == saved.layers[1].grad_output.amax_history);

  // Another history length, other layers, another precision: refused, naming what differs.
  accel::Accelerator<accel::Ddp, accel::Fp8> shorter_history(history_of(4));
  Training shorter(shorter_history);
  CHECK_THROWS_WITH_AS(shorter_history.load_state(folder / "fp8"),
                       doctest::Contains("amax history of 8 steps"), accel::Error);
  accel::Accelerator<accel::Ddp, accel::Fp8> no_layers;
  CHECK_THROWS_WITH_AS(internals(no_layers).load_precision_state(saved),
                       doctest::Contains("fp8 scaling state for the layers [0, 2]"), accel::Error);
  accel::Accelerator<accel::Ddp, accel::Bf16> bf16_accelerator;
  Training bf16(bf16_accelerator);
  CHECK_THROWS_WITH_AS(bf16_accelerator.load_state(folder / "fp8"),
                       doctest::Contains("saved under Fp8 and this Accelerator is Bf16"), accel::Error);
  fs::remove_all(folder);
}

}  // namespace unit_fp8_training
