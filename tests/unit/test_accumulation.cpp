// GradAccum<N>: N micro-batches make the same update as one batch N times larger, including
// the shorter last window of an epoch; step/zero_grad/scheduler are no-ops mid-window.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include "helpers.hpp"

using accel_test::Regression;

namespace {

// Trains `epochs` epochs over a prepared loader and returns the model.
template <class Accel, class Optimizer>
accel_test::Mlp train(std::int64_t samples, std::int64_t batch_size, int epochs) {
  Accel accelerator;
  auto net = accel_test::seeded_mlp();
  Optimizer optimizer(net->parameters(), 0.05);
  accel::DataLoader loader(Regression(samples), {.batch_size = batch_size, .shuffle = true});
  auto [model, opt, batches] = accelerator.prepare(net, optimizer, loader);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (const auto& batch : batches) {
      accelerator.backward(torch::mse_loss(model(batch.x), batch.y));
      opt.step();
      opt.zero_grad();
    }
  }
  return net;
}

using Accum4 = accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<4>>;
using NoAccum = accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<1>>;

}  // namespace

TEST_CASE("GradAccum<4> over micro-batches of 8 equals steps over batches of 32 (SGD)") {
  // 32 samples: exactly one window per epoch.
  auto accumulated = train<Accum4, torch::optim::SGD>(32, 8, 3);
  auto reference = train<NoAccum, torch::optim::SGD>(32, 32, 3);
  CHECK(accel_test::max_relative_difference(*accumulated, *reference) <= 1e-6);
}

TEST_CASE("the short last window of an epoch is scaled by its real length") {
  // 40 samples: a window of 4 micro-batches, then a window of 1 (8 samples), every epoch.
  // The reference steps over 32 then 8 samples; Adam amplifies any mis-scaling of the update.
  auto accumulated = train<Accum4, torch::optim::Adam>(40, 8, 3);
  auto reference = train<NoAccum, torch::optim::Adam>(40, 32, 3);
  CHECK(accel_test::max_relative_difference(*accumulated, *reference) <= 1e-6);
  auto sgd_accumulated = train<Accum4, torch::optim::SGD>(40, 8, 3);
  auto sgd_reference = train<NoAccum, torch::optim::SGD>(40, 32, 3);
  CHECK(accel_test::max_relative_difference(*sgd_accumulated, *sgd_reference) <= 1e-6);
}

TEST_CASE("sync_gradients and end_of_data are known as each batch arrives") {
  Accum4 accelerator;
  auto net = accel_test::seeded_mlp();
  accel::DataLoader loader(Regression(40), {.batch_size = 8});
  auto batches = accelerator.prepare(loader);
  std::vector<bool> sync, end;
  std::vector<int> window;
  for (const auto& batch : batches) {
    sync.push_back(accelerator.sync_gradients());  // before backward: known from the loader
    end.push_back(accelerator.end_of_data());
    window.push_back(accelerator.gradient_state().window_length());
    accelerator.backward(net->forward(batch.x).sum());
  }
  CHECK(sync == std::vector<bool>{false, false, false, true, true});
  CHECK(end == std::vector<bool>{false, false, false, false, true});
  CHECK(window == std::vector<int>{4, 4, 4, 4, 1});
}

TEST_CASE("optimizer and scheduler act only when a window completes") {
  accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<3>> accelerator;
  auto net = accel_test::seeded_mlp();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(1.0));
  torch::optim::StepLR schedule(sgd, /*step_size=*/1, /*gamma=*/0.5);
  auto [model, optimizer, scheduler] = accelerator.prepare(net, sgd, schedule);
  const Regression data(8);
  const auto before = net->fc2->bias.clone();
  std::vector<double> learning_rates;
  for (int micro_step = 0; micro_step < 6; ++micro_step) {
    // zero_grad first, as many loops do: it must not drop the window's gradients.
    optimizer.zero_grad();
    accelerator.backward(torch::mse_loss(model(data.inputs), data.targets));
    optimizer.step();
    scheduler.step();
    learning_rates.push_back(sgd.param_groups()[0].options().get_lr());
    if (micro_step < 2) CHECK(torch::equal(net->fc2->bias, before));
  }
  CHECK_FALSE(torch::equal(net->fc2->bias, before));
  // libtorch's StepLR changes the rate from its second step on: two steps in six micro-steps.
  CHECK(learning_rates == std::vector<double>{1.0, 1.0, 1.0, 1.0, 1.0, 0.5});
}

TEST_CASE("zero_grad before forward and after step give the same training") {
  auto run = [](bool zero_first) {
    Accum4 accelerator;
    auto net = accel_test::seeded_mlp();
    torch::optim::SGD sgd(net->parameters(), 0.1);
    auto [model, optimizer] = accelerator.prepare(net, sgd);
    const Regression data(16);
    for (int i = 0; i < 8; ++i) {
      if (zero_first) optimizer.zero_grad();
      auto rows = torch::arange(2 * i, 2 * i + 2);
      accelerator.backward(torch::mse_loss(model(data.inputs.index({rows})),
                                           data.targets.index({rows})));
      optimizer.step();
      if (!zero_first) optimizer.zero_grad();
    }
    return net;
  };
  auto a = run(true), b = run(false);
  CHECK(accel_test::max_relative_difference(*a, *b) == 0.0);
}

TEST_CASE("without a prepared loader every backward is a micro-step") {
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> accelerator;
  auto net = accel_test::seeded_mlp();
  const Regression data(4);
  std::vector<bool> sync;
  for (int i = 0; i < 4; ++i) {
    accelerator.backward(net->forward(data.inputs).sum());
    sync.push_back(accelerator.sync_gradients());
  }
  CHECK(sync == std::vector<bool>{false, true, false, true});
}

TEST_CASE("evaluation under NoGradGuard does not advance accumulation") {
  Accum4 accelerator;
  auto net = accel_test::seeded_mlp();
  accel::DataLoader train_loader(Regression(32), {.batch_size = 8});
  accel::DataLoader eval_loader(Regression(24), {.batch_size = 8});
  auto [train_batches, eval_batches] = accelerator.prepare(train_loader, eval_loader);
  int seen = 0;
  for (const auto& batch : train_batches) {
    accelerator.backward(net->forward(batch.x).sum());
    if (++seen == 2) {
      torch::NoGradGuard no_grad;
      for (const auto& eval_batch : eval_batches) (void)net->forward(eval_batch.x);
    }
  }
  CHECK(accelerator.sync_gradients());
  CHECK(accelerator.gradient_state().position_in_window() == 4);
}

TEST_CASE("several backward() per batch share the batch's micro-step (a GAN)") {
  // Two models, two optimizers, two losses per batch, GradAccum<2> over 8 batches: each
  // optimizer steps once per window, 4 times.
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> accelerator;
  auto generator = accel_test::seeded_mlp(1), discriminator = accel_test::seeded_mlp(2);
  torch::optim::Adam g_adam(generator->parameters(), 0.01), d_adam(discriminator->parameters(), 0.01);
  accel::DataLoader loader(Regression(16), {.batch_size = 2});
  auto [g, d, g_opt, d_opt, batches] =
      accelerator.prepare(generator, discriminator, g_adam, d_adam, loader);
  for (const auto& batch : batches) {
    accelerator.backward(torch::mse_loss(d(batch.x), batch.y));
    d_opt.step();
    d_opt.zero_grad();
    accelerator.backward(torch::mse_loss(g(batch.x), batch.y));
    g_opt.step();
    g_opt.zero_grad();
  }
  const auto steps = [](torch::optim::Adam& adam) {
    REQUIRE_FALSE(adam.state().empty());
    return static_cast<torch::optim::AdamParamState&>(*adam.state().begin()->second).step();
  };
  CHECK(steps(g_adam) == 4);
  CHECK(steps(d_adam) == 4);
}

TEST_CASE("accumulate() makes one micro-step of every backward inside it") {
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> accelerator;
  auto net = accel_test::seeded_mlp();
  const Regression data(4);
  std::vector<bool> sync;
  for (int i = 0; i < 4; ++i) {
    auto step = accelerator.accumulate();
    accelerator.backward(net->forward(data.inputs).sum());
    accelerator.backward(net->forward(data.inputs).mean());
    sync.push_back(accelerator.sync_gradients());
  }
  CHECK(sync == std::vector<bool>{false, true, false, true});
  // After the scope, each backward is a micro-step again.
  accelerator.backward(net->forward(data.inputs).sum());
  accelerator.backward(net->forward(data.inputs).sum());
  CHECK(accelerator.sync_gradients());
  CHECK(accelerator.gradient_state().position_in_window() == 2);
}

TEST_CASE("a backward() after the loader's epoch is a micro-step of its own") {
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> accelerator;
  auto net = accel_test::seeded_mlp();
  accel::DataLoader loader(Regression(4), {.batch_size = 2});
  auto batches = accelerator.prepare(loader);
  for (const auto& batch : batches) accelerator.backward(net->forward(batch.x).sum());
  CHECK(accelerator.sync_gradients());
  accelerator.backward(net->forward(Regression(2).inputs).sum());
  CHECK_FALSE(accelerator.sync_gradients());  // the first of a new window
}
