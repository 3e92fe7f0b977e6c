// Fp16's dynamic loss scaling: the scaler's arithmetic against torch.amp.GradScaler's rules, and
// its path through the Accelerator (scaled backward, one unscale per window, skipped steps, the
// scheduler held back, clipping by norm and by value after unscaling). The Accelerator runs it
// under LossScaledFp32 (fp32 arithmetic, Fp16's scaler), so that it is tested on libtorch 1.13's
// CPU too, with gradients injected where a real overflow is hard to provoke.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../loss_scaled_fp32.hpp"
#include "helpers.hpp"

using accel::testing::internals;

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_loss_scaling {

namespace {

using accel::LossScalingOptions;
using accel::precision::LossScaleState;
using accel::precision::unscale_gradients;
using accel::precision::updated;

const float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

// An LR scheduler that counts its steps and leaves the rate alone.
struct CountingScheduler : torch::optim::LRScheduler {
  using LRScheduler::LRScheduler;
  int steps = 0;
  std::vector<double> get_lrs() override {
    ++steps;
    return get_current_lrs();
  }
};

std::vector<torch::Tensor> grads_of(torch::nn::Module& net) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : net.parameters()) grads.push_back(p.grad().clone());
  return grads;
}

std::vector<torch::Tensor> values_of(torch::nn::Module& net) {
  std::vector<torch::Tensor> values;
  for (const auto& p : net.parameters()) values.push_back(p.detach().clone());
  return values;
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// Adam's state, every tensor of it (the step count as a tensor), in the state map's order.
std::vector<torch::Tensor> adam_state(torch::optim::Adam& adam) {
  std::vector<torch::Tensor> tensors;
  for (const auto& [key, base] : adam.state()) {
    const auto& s = static_cast<const torch::optim::AdamParamState&>(*base);
    tensors.push_back(s.exp_avg().clone());
    tensors.push_back(s.exp_avg_sq().clone());
    tensors.push_back(torch::tensor(static_cast<std::int64_t>(s.step())));
  }
  return tensors;
}

// The gradients of one fixed loss on a fresh copy of the seeded model, unscaled: the reference.
std::vector<torch::Tensor> reference_grads(const accel_test::Regression& data) {
  auto net = accel_test::seeded_mlp();
  torch::mse_loss(net(data.inputs), data.targets).backward();
  return grads_of(*net);
}

}  // namespace

TEST_CASE("loss scaling defaults are PyTorch's GradScaler's") {
  const LossScalingOptions defaults;
  CHECK(defaults.init_scale == 65536.0);
  CHECK(defaults.growth_factor == 2.0);
  CHECK(defaults.backoff_factor == 0.5);
  CHECK(defaults.growth_interval == 2000);
  accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32> accelerator;
  CHECK(accelerator.loss_scale() == 65536.0);
  CHECK(internals(accelerator).precision_state() == LossScaleState{65536.0f, 0});
}

TEST_CASE("the scale backs off on inf/nan, grows after growth_interval clean steps, never to inf") {
  const LossScalingOptions o{.init_scale = 8, .growth_interval = 3};
  LossScaleState s{8.0f, 0};
  s = updated(s, false, o);
  CHECK(s == LossScaleState{8.0f, 1});
  s = updated(s, false, o);
  CHECK(s == LossScaleState{8.0f, 2});
  s = updated(s, false, o);
  CHECK(s == LossScaleState{16.0f, 0});
  s = updated(updated(s, false, o), false, o);
  CHECK(s == LossScaleState{16.0f, 2});
  s = updated(s, true, o);  // the count starts again after a backoff
  CHECK(s == LossScaleState{8.0f, 0});
  // Growing past fp32's largest value keeps the scale; the count starts again.
  const float big = std::numeric_limits<float>::max() / 1.5f;
  CHECK(updated({big, 2}, false, o) == LossScaleState{big, 0});

  // PyTorch's kernel, where this build has it on CPU, gives the same states step by step.
  if (accel::precision::has_native_amp_ops(torch::kCPU)) {
    LossScaleState plain{8.0f, 0}, native{8.0f, 0};
    const LossScalingOptions odd{.init_scale = 8, .growth_factor = 3.0, .backoff_factor = 0.3,
                                 .growth_interval = 2};
    for (const bool found : {false, false, true, false, false, false, true, true, false, false}) {
      plain = updated(plain, found, odd, false);
      native = updated(native, found, odd, true);
      CHECK(plain == native);
    }
    CHECK(updated({big, 1}, false, odd, true) == updated({big, 1}, false, odd, false));
  } else {
    MESSAGE("no AMP scaler kernels on CPU in this libtorch: the plain update alone is tested");
  }
}

TEST_CASE("unscale_gradients divides by the scale and finds inf, -inf and nan") {
  std::vector<bool> modes{false};
  if (accel::precision::has_native_amp_ops(torch::kCPU)) modes.push_back(true);
  for (const bool native : modes) {
    CAPTURE(native);
    torch::manual_seed(3);
    const auto a = torch::randn({5, 4}), b = torch::randn({7});
    std::vector<torch::Tensor> grads{a.clone(), b.clone()};
    CHECK_FALSE(unscale_gradients(grads, 1024.0f, native));
    CHECK(torch::equal(grads[0], a / 1024));
    CHECK(torch::equal(grads[1], b / 1024));
    // A scale that is not a power of two: multiplied by fp32(1/scale), as GradScaler does.
    std::vector<torch::Tensor> thirds{a.clone()};
    CHECK_FALSE(unscale_gradients(thirds, 3.0f, native));
    CHECK(torch::equal(thirds[0], a * torch::full({}, static_cast<float>(1.0 / 3.0))));
    for (const float bad : {kInf, -kInf, kNan}) {
      CAPTURE(bad);
      std::vector<torch::Tensor> hit{a.clone(), b.clone()};
      hit[1][3] = bad;
      CHECK(unscale_gradients(hit, 2.0f, native));
      CHECK(torch::equal(hit[0], a / 2));  // every gradient is still unscaled
    }
    // Undefined and empty gradients are passed over.
    CHECK_FALSE(unscale_gradients({torch::Tensor(), torch::empty({0})}, 2.0f, native));
  }
  if (accel::precision::has_native_amp_ops(torch::kCPU)) {
    // Bit for bit the same as PyTorch's kernel.
    const auto g = torch::randn({64}) * 1000;
    std::vector<torch::Tensor> plain{g.clone()}, native{g.clone()};
    unscale_gradients(plain, 65536.0f * 3, false);
    unscale_gradients(native, 65536.0f * 3, true);
    CHECK(torch::equal(plain[0], native[0]));
  }
}

TEST_CASE("loss scaling options are checked at construction, naming the value") {
  using Accel = accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32>;
  auto with = [](LossScalingOptions o) {
    accel::Options options;
    options.loss_scaling = o;
    Accel accelerator(options);
  };
  CHECK_THROWS_WITH_AS(with({.init_scale = 0}),
                       "accel: Options::loss_scaling.init_scale is 0; it must be positive and "
                       "finite in fp32 (PyTorch's default, 65536 = 2^16, is accel's too)",
                       accel::Error);
  CHECK_THROWS_WITH_AS(with({.init_scale = 1e39}),
                       doctest::Contains("init_scale is 1e+39; it must be positive and finite"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(with({.growth_factor = 1.0}),
                       doctest::Contains("growth_factor is 1; it must be finite and > 1"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(with({.backoff_factor = 1.0}),
                       doctest::Contains("backoff_factor is 1; it must lie in (0, 1)"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(with({.growth_interval = 0}),
                       doctest::Contains("growth_interval is 0; it must be at least 1"),
                       accel::Error);
  Accel fine;
  CHECK_THROWS_WITH_AS(internals(fine).load_precision_state({-1.0f, 0}),
                       doctest::Contains("accel: loss scale state {scale -1, growth_tracker 0}"),
                       accel::Error);
}

TEST_CASE("backward scales the loss, gradients are unscaled exactly once, clipping first") {
  const accel_test::Regression data(64);
  const auto expected = reference_grads(data);
  for (const bool clip_first : {false, true}) {
    CAPTURE(clip_first);
    accel::Options options;
    options.loss_scaling.init_scale = 1024;
    accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32> accelerator(options);
    auto net = accel_test::seeded_mlp();
    auto reference = accel_test::seeded_mlp();
    torch::optim::SGD sgd(net->parameters(), 0.1), reference_sgd(reference->parameters(), 0.1);
    auto [model, optimizer] = accelerator.prepare(net, sgd);
    accelerator.backward(torch::mse_loss(model(data.inputs), data.targets));
    // Scaling by a power of two is exact: the gradients are the reference's times 1024.
    const auto scaled = grads_of(*net);
    for (std::size_t i = 0; i < scaled.size(); ++i) CHECK(torch::equal(scaled[i], expected[i] * 1024));
    if (clip_first) {
      // A max_norm far above the norm: nothing clipped; the norm measured is the true one.
      double reference_norm = 0;
      for (const auto& g : expected) reference_norm += g.pow(2).sum().item<double>();
      const double norm = accelerator.clip_grad_norm(1e9);
      CHECK(norm == doctest::Approx(std::sqrt(reference_norm)).epsilon(1e-6));
      CHECK(all_equal(grads_of(*net), expected));
      // Asking again does not divide twice.
      accelerator.unscale_gradients();
      CHECK(all_equal(grads_of(*net), expected));
    }
    optimizer.step();
    CHECK_FALSE(accelerator.optimizer_step_was_skipped());
    torch::mse_loss(reference(data.inputs), data.targets).backward();
    reference_sgd.step();
    CHECK(all_equal(values_of(*net), values_of(*reference)));
  }
}

TEST_CASE("clip_grad_norm clips the unscaled gradients, and mid-window reports the true norm") {
  const accel_test::Regression data(64);
  const auto expected = reference_grads(data);
  double squares = 0;
  for (const auto& g : expected) squares += g.pow(2).sum().item<double>();
  const double true_norm = std::sqrt(squares);
  accel::Options options;
  options.loss_scaling.init_scale = 4096;
  accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32, accel::GradAccum<2>> accelerator(
      options);
  auto net = accel_test::seeded_mlp();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  {
    auto micro = accelerator.accumulate();
    accelerator.backward(torch::mse_loss(model(data.inputs), data.targets));
    // Half the loss (a window of two), times 4096, measured back in true units.
    CHECK(accelerator.clip_grad_norm(1e-3) == doctest::Approx(true_norm / 2).epsilon(1e-6));
    // Mid-window nothing is unscaled or clipped.
    const auto held = grads_of(*net);
    for (std::size_t i = 0; i < held.size(); ++i) CHECK(torch::equal(held[i], expected[i] * 2048));
  }
  {
    auto micro = accelerator.accumulate();
    accelerator.backward(torch::mse_loss(model(data.inputs), data.targets));
    const double max_norm = true_norm / 4;
    CHECK(accelerator.clip_grad_norm(max_norm) == doctest::Approx(true_norm).epsilon(1e-6));
    const auto clipped = grads_of(*net);
    double clipped_squares = 0;
    for (std::size_t i = 0; i < clipped.size(); ++i) {
      CHECK(torch::allclose(clipped[i], expected[i] / 4, 1e-5, 1e-8));
      clipped_squares += clipped[i].pow(2).sum().item<double>();
    }
    CHECK(std::sqrt(clipped_squares) == doctest::Approx(max_norm).epsilon(1e-5));
  }
}

TEST_CASE("clip_grad_value clamps the unscaled gradients, unscaled once, mid-window nothing") {
  const accel_test::Regression data(64);
  const auto expected = reference_grads(data);
  double largest = 0;
  for (const auto& g : expected) largest = std::max(largest, g.abs().max().item<double>());
  const double clip_value = largest / 3;
  accel::Options options;
  options.loss_scaling.init_scale = 4096;
  accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32, accel::GradAccum<2>> accelerator(
      options);
  auto net = accel_test::seeded_mlp();
  auto reference = accel_test::seeded_mlp();
  torch::optim::SGD sgd(net->parameters(), 0.1), reference_sgd(reference->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  {
    auto micro = accelerator.accumulate();
    accelerator.backward(torch::mse_loss(model(data.inputs), data.targets));
    accelerator.clip_grad_value(clip_value);  // half the window, still scaled: left alone
    const auto held = grads_of(*net);
    for (std::size_t i = 0; i < held.size(); ++i) CHECK(torch::equal(held[i], expected[i] * 2048));
  }
  {
    auto micro = accelerator.accumulate();
    accelerator.backward(torch::mse_loss(model(data.inputs), data.targets));
    accelerator.clip_grad_value(clip_value);
    // Scaling by powers of two is exact: the window's mean gradient, unscaled, then clamped.
    std::vector<torch::Tensor> clamped;
    for (const auto& g : expected) clamped.push_back(g.clamp(-clip_value, clip_value));
    CHECK(all_equal(grads_of(*net), clamped));
    optimizer.step();  // does not unscale again
    CHECK_FALSE(accelerator.optimizer_step_was_skipped());
    for (std::size_t i = 0; i < clamped.size(); ++i)
      reference->parameters()[i].mutable_grad() = clamped[i].clone();
    reference_sgd.step();
    CHECK(all_equal(values_of(*net), values_of(*reference)));
  }
}

TEST_CASE("a step whose gradients hold inf or nan is skipped: parameters, state and schedule stay") {
  for (const float bad : {kInf, kNan}) {
    CAPTURE(bad);
    const accel_test::Regression data(64);
    accel::Options options;
    options.loss_scaling.init_scale = 256;
    accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32> accelerator(options);
    auto net = accel_test::seeded_mlp();
    torch::optim::Adam adam(net->parameters(), 0.01);
    CountingScheduler counting(adam);
    auto [model, optimizer, schedule] = accelerator.prepare(net, adam, counting);
    auto train_step = [&](bool poison) {
      accelerator.backward(torch::mse_loss(model(data.inputs), data.targets));
      if (poison) net->fc1->weight.mutable_grad()[0][1] = bad;
      optimizer.step();
      schedule.step();
      optimizer.zero_grad();
    };
    train_step(false);
    CHECK_FALSE(accelerator.optimizer_step_was_skipped());
    CHECK(counting.steps == 1);
    const auto before = values_of(*net);
    const auto state = adam_state(adam);
    REQUIRE(state.size() == 12);  // 4 parameters

    train_step(true);
    CHECK(accelerator.optimizer_step_was_skipped());
    CHECK(all_equal(values_of(*net), before));
    CHECK(all_equal(adam_state(adam), state));
    CHECK(counting.steps == 1);  // held back with the step
    CHECK(internals(accelerator).precision_state() == LossScaleState{128.0f, 0});
    CHECK(internals(accelerator).precision().skipped_steps() == 1);

    train_step(false);  // the next clean step runs at the lower scale
    CHECK(accelerator.loss_scale() == 128.0);
    CHECK_FALSE(accelerator.optimizer_step_was_skipped());
    CHECK_FALSE(all_equal(values_of(*net), before));
    CHECK_FALSE(all_equal(adam_state(adam), state));
    CHECK(counting.steps == 2);
  }
}

TEST_CASE("the scale grows after growth_interval clean steps and is saved and restored") {
  const accel_test::Regression data(32);
  accel::Options options;
  options.loss_scaling = {.init_scale = 4, .growth_factor = 2, .growth_interval = 3};
  accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32> accelerator(options);
  auto net = accel_test::seeded_mlp();
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  std::vector<double> scales;
  for (int step = 0; step < 7; ++step) {
    accelerator.backward(torch::mse_loss(model(data.inputs), data.targets));
    scales.push_back(accelerator.loss_scale());
    optimizer.step();
    optimizer.zero_grad();
  }
  CHECK(scales == std::vector<double>{4, 4, 4, 8, 8, 8, 16});
  CHECK(internals(accelerator).precision_state() == LossScaleState{16.0f, 1});

  accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32> resumed(options);
  internals(resumed).load_precision_state(internals(accelerator).precision_state());
  CHECK(resumed.loss_scale() == 16.0);
  CHECK(internals(resumed).precision_state() == LossScaleState{16.0f, 1});
}

TEST_CASE("under GradAccum the scale is constant within a window and changes between windows") {
  const accel_test::Regression data(32);
  accel::Options options;
  options.loss_scaling = {.init_scale = 64, .growth_interval = 1};
  accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32, accel::GradAccum<3>> accelerator(
      options);
  auto net = accel_test::seeded_mlp();
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  std::vector<double> scales;
  std::vector<bool> skipped;
  for (int micro = 0; micro < 9; ++micro) {
    auto scope = accelerator.accumulate();
    accelerator.backward(torch::mse_loss(model(data.inputs), data.targets));
    // An overflow in the middle of the second window: the whole window is skipped at its end.
    if (micro == 4) net->fc2->bias.mutable_grad()[0] = kInf;
    scales.push_back(accelerator.loss_scale());
    optimizer.step();
    skipped.push_back(accelerator.optimizer_step_was_skipped());
    optimizer.zero_grad();
  }
  // Growth every clean step (interval 1): 64 -> 128; the poisoned window backs off to 64.
  CHECK(scales == std::vector<double>{64, 64, 64, 128, 128, 128, 64, 64, 64});
  CHECK(skipped == std::vector<bool>{false, false, false, false, false, true, true, true, false});
}

TEST_CASE("two optimizers in one micro-step: each unscaled once, one scale update per window") {
  // A GAN's pattern: two losses, two optimizers, one batch; one of them overflows.
  const accel_test::Regression data(32);
  accel::Options options;
  options.loss_scaling = {.init_scale = 32, .growth_interval = 1};
  accel::Accelerator<accel::Ddp, accel_test::LossScaledFp32> accelerator(options);
  auto first = accel_test::seeded_mlp(1), second = accel_test::seeded_mlp(2);
  torch::optim::SGD sgd_first(first->parameters(), 0.01), sgd_second(second->parameters(), 0.01);
  auto [a, b, opt_a, opt_b] = accelerator.prepare(first, second, sgd_first, sgd_second);
  for (const bool overflow : {false, true}) {
    CAPTURE(overflow);
    const auto b_before = values_of(*second);
    auto scope = accelerator.accumulate();
    accelerator.backward(torch::mse_loss(a(data.inputs), data.targets));
    opt_a.step();
    CHECK_FALSE(accelerator.optimizer_step_was_skipped());
    accelerator.backward(torch::mse_loss(b(data.inputs), data.targets));
    if (overflow) second->fc1->bias.mutable_grad()[0] = kNan;
    opt_b.step();
    CHECK(accelerator.optimizer_step_was_skipped() == overflow);
    CHECK(all_equal(values_of(*second), b_before) == overflow);
    opt_a.zero_grad();
    opt_b.zero_grad();
  }
  // 32 -> 64 after the clean window (one growth, not one per optimizer), then back to 32.
  CHECK(internals(accelerator).precision_state() == LossScaleState{32.0f, 0});
}

}  // namespace unit_loss_scaling
