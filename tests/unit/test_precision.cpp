// Precision policies: Bf16 runs forward under autocast and hands outputs back in fp32.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include "helpers.hpp"

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
  const auto out = model(torch::randn({2, 4}));
  CHECK(accel_test::dtype_name(probe->inner_dtype) == "Float");
  CHECK_FALSE(probe->autocast_on);
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

TEST_CASE("Bf16 training follows Fp32 training closely") {
  auto run = [](auto accelerator_tag) {
    typename decltype(accelerator_tag)::type accelerator;
    auto net = accel_test::seeded_mlp();
    torch::optim::Adam adam(net->parameters(), 0.01);
    accel::DataLoader loader(accel_test::Regression(256), {.batch_size = 32, .shuffle = true});
    auto [model, optimizer, batches] = accelerator.prepare(net, adam, loader);
    double last = 0;
    for (int epoch = 0; epoch < 10; ++epoch)
      for (const auto& batch : batches) {
        auto loss = torch::mse_loss(model(batch.x), batch.y);
        accelerator.backward(loss);
        optimizer.step();
        optimizer.zero_grad();
        last = loss.template item<double>();
      }
    return last;
  };
  const double fp32 = run(std::type_identity<accel::Accelerator<accel::Ddp, accel::Fp32>>{});
  const double bf16 = run(std::type_identity<accel::Accelerator<accel::Ddp, accel::Bf16>>{});
  CHECK(fp32 < 0.1);
  CHECK(bf16 < 0.1);
}

TEST_CASE("Fp16 and Fp8 fail at construction with a clear message") {
  CHECK_THROWS_WITH_AS((accel::Accelerator<accel::Ddp, accel::Fp16>()),
                       doctest::Contains("accel: Fp16 training is not available"), accel::Error);
  CHECK_THROWS_WITH_AS((accel::Accelerator<accel::Ddp, accel::Fp8>()),
                       doctest::Contains("accel: Fp8 training is not available"), accel::Error);
}
