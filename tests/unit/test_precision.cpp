// Precision policies: Bf16 runs forward under autocast and hands outputs back in fp32.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "helpers.hpp"

using accel::testing::internals;

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_precision {

namespace {

// Records the dtype its matmul ran in and whether autocast was on.
struct ProbeImpl : torch::nn::Module {
  torch::nn::Linear linear{nullptr};
  c10::ScalarType inner_dtype = c10::ScalarType::Undefined;
  bool autocast_on = false;
  ProbeImpl() { linear = register_module("linear", torch::nn::Linear(4, 3)); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = linear(x);
    inner_dtype = y.scalar_type();
    autocast_on = accel::detail::autocast_enabled(x.device().type());
    return y;
  }
};
TORCH_MODULE(Probe);

// Mean squared error of a model on a whole dataset, in fp32 outside any autocast.
double full_loss(accel_test::Mlp& net, const accel_test::Regression& data) {
  torch::NoGradGuard no_grad;
  return torch::mse_loss(net(data.inputs), data.targets).item<double>();
}

}  // namespace

TEST_CASE("Bf16: forward computes in bf16, outputs come back in fp32, autocast is restored") {
  accel::Accelerator<accel::Ddp, accel::Bf16> accelerator;
  Probe probe;
  auto model = accelerator.prepare(probe);
  const auto out = model(torch::randn({2, 4}));
  CHECK(accel_test::dtype_name(probe->inner_dtype) == "BFloat16");
  CHECK(probe->autocast_on);
  CHECK(accel_test::dtype_name(out) == "Float");
  CHECK_FALSE(accel::detail::autocast_enabled(torch::kCPU));
  // Master weights stay fp32.
  CHECK(accel_test::dtype_name(probe->linear->weight) == "Float");
}

TEST_CASE("Fp32: no autocast, outputs untouched") {
  accel::Accelerator<accel::Zero3, accel::Fp32> accelerator;
  Probe probe;
  auto model = accelerator.prepare(probe);
  const auto x = torch::randn({2, 4});
  const auto out = model(x);
  CHECK(accel_test::dtype_name(probe->inner_dtype) == "Float");
  CHECK_FALSE(probe->autocast_on);
  // The prepared model's output is the module's own forward, bit for bit: no cast, no rounding.
  const auto direct = probe->forward(x);
  CHECK(accel_test::dtype_name(out) == "Float");
  CHECK(torch::equal(out, direct));
}

TEST_CASE("autocast guards nest and restore the enclosing state") {
  accel::Accelerator<accel::Ddp, accel::Bf16> accelerator;
  {
    auto outer = accelerator.autocast();
    CHECK(accel::detail::autocast_enabled(torch::kCPU));
    {
      auto inner = accelerator.autocast();
      CHECK(accel_test::dtype_name(accel::detail::autocast_dtype(torch::kCPU)) == "BFloat16");
    }
    CHECK(accel::detail::autocast_enabled(torch::kCPU));
  }
  CHECK_FALSE(accel::detail::autocast_enabled(torch::kCPU));
}

namespace {

// The same model, data, batch order (the loader's seeded shuffle) and optimizer, trained once per
// precision; each run reports its mean training loss per epoch and its final loss on the whole
// set, computed in fp32.
struct Run {
  std::vector<double> epoch_loss;
  double final_loss = 0;
  std::vector<int> skipped_steps;  // optimizer steps the loss scaler skipped
};

template <class Accel>
Run train_regression(const accel_test::Regression& data, accel::Options options = {}) {
  Accel accelerator(options);
  auto net = accel_test::seeded_mlp();
  torch::optim::Adam adam(net->parameters(), 0.01);
  accel::DataLoader loader(data, {.batch_size = 32, .shuffle = true});
  auto [model, optimizer, batches] = accelerator.prepare(net, adam, loader);
  Run result;
  int step = 0;
  for (int epoch = 0; epoch < 10; ++epoch) {
    double sum = 0;
    int count = 0;
    for (const auto& batch : batches) {
      auto loss = torch::mse_loss(model(batch.x), batch.y);
      accelerator.backward(loss);
      optimizer.step();
      if (accelerator.optimizer_step_was_skipped()) result.skipped_steps.push_back(step);
      ++step;
      optimizer.zero_grad();
      sum += loss.template item<double>();
      ++count;
    }
    result.epoch_loss.push_back(sum / count);
  }
  result.final_loss = full_loss(net, data);
  return result;
}

// Each epoch's mean loss and the final loss within 3% of fp32's plus 0.001.
void check_follows(const Run& fp32, const Run& reduced) {
  // Both learn: the first epoch's mean loss is about 2.7.
  CHECK(fp32.final_loss < 0.1);
  CHECK(reduced.final_loss < 0.1);
  REQUIRE(fp32.epoch_loss.size() == reduced.epoch_loss.size());
  for (std::size_t epoch = 0; epoch < fp32.epoch_loss.size(); ++epoch) {
    CAPTURE(epoch);
    CHECK(std::abs(reduced.epoch_loss[epoch] - fp32.epoch_loss[epoch]) <=
          0.03 * fp32.epoch_loss[epoch] + 0.001);
  }
  CHECK(std::abs(reduced.final_loss - fp32.final_loss) <= 0.03 * fp32.final_loss + 0.001);
}

}  // namespace

TEST_CASE("Bf16 training follows Fp32 training closely") {
  const accel_test::Regression data(256);
  const Run fp32 = train_regression<accel::Accelerator<accel::Ddp, accel::Fp32>>(data);
  const Run bf16 = train_regression<accel::Accelerator<accel::Ddp, accel::Bf16>>(data);
  // Tolerance: bf16 keeps 8 significant bits, so each op in bf16 rounds by up to 2^-8 (0.4%);
  // measured on libtorch 1.13, the two runs' epoch losses differ by at most 0.4% (0.0005), and
  // their final losses by 0.01%. 3% of the fp32 loss plus 0.001 is about eight times that: room
  // for another BLAS or libtorch's own autocast op lists, and tight enough that bf16 training
  // that drifts off (gradients lost to rounding, a wrong cast or scale) fails.
  check_follows(fp32, bf16);
}

// The two Fp16 training cases are registered only where libtorch has fp16 matmul on CPU (2.x;
// tests/skip.hpp): elsewhere Fp16 is refused on CPU (tested below).
TEST_CASE("Fp16 training follows Fp32 training closely (libtorch 2.x)" *
          doctest::skip(!accel::detail::cpu_has_half_matmul)) {
  const accel_test::Regression data(256);
  const Run fp32 = train_regression<accel::Accelerator<accel::Ddp, accel::Fp32>>(data);
  // A scale at which nothing overflows (the default's first steps do: next case), so that the
  // two runs take the same steps and differ by rounding only. fp16 keeps 11 significant bits:
  // the bf16 test's tolerance holds with room to spare; a scale not divided back out, or
  // gradients unscaled twice, miss it by orders of magnitude.
  accel::Options options;
  options.loss_scaling.init_scale = 1024;
  const Run fp16 = train_regression<accel::Accelerator<accel::Ddp, accel::Fp16>>(data, options);
  CHECK(fp16.skipped_steps.empty());
  check_follows(fp32, fp16);
}

TEST_CASE("Fp16 with PyTorch's default scale: the first steps overflow, are skipped, and training "
          "ends where Fp32's does (libtorch 2.x)" *
          doctest::skip(!accel::detail::cpu_has_half_matmul)) {
  const accel_test::Regression data(256);
  const Run fp32 = train_regression<accel::Accelerator<accel::Ddp, accel::Fp32>>(data);
  const Run fp16 = train_regression<accel::Accelerator<accel::Ddp, accel::Fp16>>(data);
  MESSAGE(fmt::format("skipped steps {} of 80; final loss {:.5f} against fp32's {:.5f}",
                      fmt::join(fp16.skipped_steps, ", "), fp16.final_loss, fp32.final_loss));
  // 2^16 times a loss of about 2.7 overflows fp16 in backward: the scale halves on each of the
  // first steps until it fits, and none overflows after (the gradients only shrink).
  REQUIRE_FALSE(fp16.skipped_steps.empty());
  for (std::size_t i = 0; i < fp16.skipped_steps.size(); ++i)
    CHECK(fp16.skipped_steps[i] == static_cast<int>(i));
  CHECK(fp16.skipped_steps.size() <= 8);
  CHECK(std::abs(fp16.final_loss - fp32.final_loss) <= 0.05 * fp32.final_loss + 0.001);
}

TEST_CASE("every ComputeType maps to its own torch dtype, float8 never becomes float32") {
  using accel::policy::ComputeType;
  using accel::precision::to_scalar_type;
  CHECK(accel_test::dtype_name(to_scalar_type(ComputeType::float32)) == "Float");
  CHECK(accel_test::dtype_name(to_scalar_type(ComputeType::bfloat16)) == "BFloat16");
  CHECK(accel_test::dtype_name(to_scalar_type(ComputeType::float16)) == "Half");
  if constexpr (accel::detail::has_float8) {
    CHECK(accel_test::dtype_name(to_scalar_type(ComputeType::float8)) ==
          accel_test::dtype_name(*accel::detail::float8_e4m3_dtype));
  } else {
    CHECK_THROWS_WITH_AS(to_scalar_type(ComputeType::float8),
                         doctest::Contains("accel: float8 needs libtorch 2.1 or newer"),
                         accel::Error);
  }
}

TEST_CASE("Fp16 on CPU: refused at once where libtorch has no fp16 matmul, else fp16 forward") {
  if constexpr (!accel::detail::cpu_has_half_matmul) {
    const std::string expected = fmt::format(
        "accel: Fp16 on CPU needs fp16 matmul and fp16 autocast on CPU, which libtorch {} lacks",
        TORCH_VERSION);
    CHECK_THROWS_WITH_AS((accel::Accelerator<accel::Ddp, accel::Fp16>()),
                         doctest::Contains(expected.c_str()), accel::Error);
    CHECK_THROWS_WITH_AS((accel::Accelerator<accel::Ddp, accel::Fp16>()),
                         doctest::Contains("use Bf16 on CPU"), accel::Error);
  } else {
    accel::Accelerator<accel::Ddp, accel::Fp16> accelerator;
    Probe probe;
    auto model = accelerator.prepare(probe);
    const auto out = model(torch::randn({2, 4}));
    CHECK(accel_test::dtype_name(probe->inner_dtype) == "Half");
    CHECK(probe->autocast_on);
    CHECK(accel_test::dtype_name(out) == "Float");
    CHECK(accel_test::dtype_name(probe->linear->weight) == "Float");
    CHECK_FALSE(accel::detail::autocast_enabled(torch::kCPU));
  }
}

TEST_CASE("Fp8: what is not an fp8 Linear runs under bf16 autocast, outputs come back in fp32") {
  accel::Accelerator<accel::Ddp, accel::Fp8> accelerator;
  Probe probe;  // its Linear is called by its forward itself, and 4 x 3 besides: not fp8
  auto model = accelerator.prepare(probe);
  const auto out = model(torch::randn({2, 4}));
  CHECK(internals(accelerator).precision().fp8_layers().empty());
  CHECK(accel_test::dtype_name(probe->inner_dtype) == "BFloat16");
  CHECK(probe->autocast_on);
  CHECK(accel_test::dtype_name(out) == "Float");
  CHECK(accel_test::dtype_name(probe->linear->weight) == "Float");
}

}  // namespace unit_precision
