// The Accelerator on one process: prepare, devices, clipping (by norm and by value), seeding,
// errors. (No virtuals: see tests/static/no_virtual_dispatch.cpp.)
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include "helpers.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_accelerator {

TEST_CASE("prepare takes objects in any order and returns them in that order") {
  accel::Accelerator<accel::Ddp> accelerator;
  auto net = accel_test::seeded_mlp();
  torch::optim::Adam adam(net->parameters());
  torch::optim::StepLR schedule(adam, 1);
  accel::DataLoader loader(accel_test::Regression(8), {.batch_size = 4});
  auto [batches, scheduler, model, optimizer] = accelerator.prepare(loader, schedule, net, adam);
  CHECK(&*optimizer == &adam);
  CHECK(&*scheduler == &schedule);
  CHECK(&batches.loader() == &loader);
  CHECK(model.module().get() == net.get());
  // Preparing again hands back equivalent handles and registers nothing twice.
  auto again = accelerator.prepare(net);
  CHECK(again.module().get() == net.get());
  auto same = accelerator.prepare(model);
  CHECK(same.module().get() == net.get());
}

TEST_CASE("the device defaults to CPU without CUDA and can be chosen") {
  accel::Accelerator<accel::Ddp> automatic;
  CHECK(automatic.device() ==
        (torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU)));
  accel::Accelerator<accel::Ddp> chosen({.device = torch::Device(torch::kCPU)});
  CHECK(chosen.device() == torch::Device(torch::kCPU));
  auto net = accel_test::seeded_mlp();
  chosen.prepare(net);
  CHECK(net->fc1->weight.device() == torch::Device(torch::kCPU));
}

TEST_CASE("process identity on a single process") {
  accel::Accelerator<accel::Zero3> accelerator;
  CHECK(accelerator.num_processes() == 1);
  CHECK(accelerator.process_index() == 0);
  CHECK(accelerator.local_process_index() == 0);
  CHECK(accelerator.is_main_process());
  CHECK(accelerator.is_local_main_process());
}

TEST_CASE("clip_grad_norm returns the norm before clipping and clips to max_norm") {
  accel::Accelerator<accel::Ddp> accelerator;
  auto net = accel_test::seeded_mlp();
  auto reference = accel_test::seeded_mlp();
  auto model = accelerator.prepare(net);
  const accel_test::Regression data(16);
  accelerator.backward(torch::mse_loss(model(data.inputs), data.targets) * 100);
  torch::mse_loss(reference->forward(data.inputs), data.targets).mul(100).backward();

  const double expected = torch::nn::utils::clip_grad_norm_(reference->parameters(), 0.5);
  const double norm = accelerator.clip_grad_norm(0.5);
  CHECK(norm == doctest::Approx(expected).epsilon(1e-6));
  REQUIRE(norm > 0.5);
  double clipped = 0;
  for (const auto& p : net->parameters()) clipped += p.grad().pow(2).sum().item<double>();
  CHECK(std::sqrt(clipped) == doctest::Approx(0.5).epsilon(1e-5));
  for (std::size_t i = 0; i < net->parameters().size(); ++i)
    CHECK(torch::allclose(net->parameters()[i].grad(), reference->parameters()[i].grad(), 1e-5,
                          1e-7));

  const double max_norm = accelerator.clip_grad_norm(1e9, std::numeric_limits<double>::infinity());
  double largest = 0;
  for (const auto& p : net->parameters())
    largest = std::max(largest, p.grad().abs().max().item<double>());
  CHECK(max_norm == doctest::Approx(largest));
  CHECK_THROWS_WITH_AS(accelerator.clip_grad_norm(0.0), doctest::Contains("max_norm is 0"),
                       accel::Error);
}

TEST_CASE("clip_grad_norm only measures in the middle of an accumulation window") {
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> accelerator;
  auto net = accel_test::seeded_mlp();
  auto model = accelerator.prepare(net);
  const accel_test::Regression data(16);
  accelerator.backward(torch::mse_loss(model(data.inputs), data.targets) * 100);
  const auto before = net->fc1->weight.grad().clone();
  CHECK(accelerator.clip_grad_norm(1e-3) > 1e-3);
  CHECK(torch::equal(net->fc1->weight.grad(), before));
}

TEST_CASE("clip_grad_value clamps every gradient element to [-clip_value, clip_value]") {
  accel::Accelerator<accel::Ddp> accelerator;
  auto net = accel_test::seeded_mlp();
  auto reference = accel_test::seeded_mlp();
  auto model = accelerator.prepare(net);
  const accel_test::Regression data(16);
  accelerator.backward(torch::mse_loss(model(data.inputs), data.targets) * 100);
  torch::mse_loss(reference->forward(data.inputs), data.targets).mul(100).backward();
  double largest = 0;
  for (const auto& p : reference->parameters())
    largest = std::max(largest, p.grad().abs().max().item<double>());
  const double clip_value = largest / 4;  // some elements are clamped, some are not

  accelerator.clip_grad_value(clip_value);
  for (std::size_t i = 0; i < net->parameters().size(); ++i) {
    const auto expected = reference->parameters()[i].grad().clamp(-clip_value, clip_value);
    CHECK(torch::allclose(net->parameters()[i].grad(), expected, 1e-5, 1e-7));
    CHECK(net->parameters()[i].grad().abs().max().item<double>() <= clip_value);
  }
  CHECK_THROWS_WITH_AS(accelerator.clip_grad_value(0.0),
                       doctest::Contains("clip_grad_value: clip_value is 0; it must be > 0"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.clip_grad_value(-1.0), doctest::Contains("clip_value is -1"),
                       accel::Error);
}

TEST_CASE("clip_grad_value does nothing in the middle of an accumulation window") {
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> accelerator;
  auto net = accel_test::seeded_mlp();
  auto model = accelerator.prepare(net);
  const accel_test::Regression data(16);
  accelerator.backward(torch::mse_loss(model(data.inputs), data.targets) * 100);
  const auto before = net->fc1->weight.grad().clone();
  accelerator.clip_grad_value(1e-6);
  CHECK(torch::equal(net->fc1->weight.grad(), before));
}

TEST_CASE("main_process_first and local_main_process_first on one process run the scope") {
  accel::Accelerator<accel::Ddp> accelerator;
  int ran = 0;
  {
    auto first = accelerator.main_process_first();
    ++ran;
  }
  {
    auto first = accelerator.local_main_process_first();
    ++ran;
  }
  CHECK(ran == 2);
}

TEST_CASE("set_seed and Options::seed make initialisation reproducible") {
  accel::Accelerator<accel::Ddp> accelerator({.seed = 11});
  const auto first = torch::randn({4});
  accelerator.set_seed(11);
  CHECK(torch::equal(first, torch::randn({4})));
}

TEST_CASE("a bad environment fails at construction, naming the variable and its value") {
  accel_test::ScopedEnv env({{"WORLD_SIZE", "two"}, {"RANK", "0"}});
  CHECK_THROWS_WITH_AS(accel::Accelerator<accel::Ddp>(),
                       doctest::Contains("WORLD_SIZE='two' is not an integer"), accel::Error);
}

TEST_CASE("the parameter digest sees every bit") {
  auto a = accel_test::seeded_mlp(), b = accel_test::seeded_mlp();
  CHECK(accel::state::parameter_digest(*a) == accel::state::parameter_digest(*b));
  CHECK(accel::state::parameter_digest_hex(*a).size() == 16);
  {
    torch::NoGradGuard no_grad;
    auto w = b->fc2->weight.view(-1);
    w[0] = std::nextafter(w[0].item<float>(), 1.0f);
  }
  CHECK(accel::state::parameter_digest(*a) != accel::state::parameter_digest(*b));
}

}  // namespace unit_accelerator
