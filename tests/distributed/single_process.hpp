// Training across processes against one process on the global batch, for the workers that
// compare a strategy with it (worker.cpp: Ddp; worker_sharded.cpp: Zero2, Zero3 and Fsdp;
// worker_data.cpp: split batches): the regression data and model, the comparisons, and the
// scenarios that each of those workers runs under its own strategies (frozen parameters, a GAN's
// two backward() per batch).
#pragma once

#include "scenario.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace accel_test {

using Ddp = accel::Accelerator<accel::Ddp, accel::Fp32>;

// K Ddp steps on W ranks equal K single-process steps on the concatenated global batch.
struct Sample {
  torch::Tensor x, y;
};
struct Regression {
  torch::Tensor inputs, targets;
  Regression() {
    torch::manual_seed(99);
    inputs = torch::randn({96, 5});
    targets = inputs.matmul(torch::linspace(-1, 1, 5)).unsqueeze(1);
  }
  std::int64_t size() const { return inputs.size(0); }
  Sample get(std::int64_t i) const { return {inputs[i], targets[i]}; }
};

inline torch::nn::Sequential regression_model() {
  return torch::nn::Sequential(torch::nn::Linear(5, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
}

// make_model: any model of 5 inputs and 1 output; it is built twice from the same seed.
// users_own_optimizer: step and zero the torch optimizer itself, not prepare()'s handle (right
// under Ddp, whose gradients live in the parameters' .grad).
// The trained net equals the one-process reference within 1e-5 and is the same, bit for bit, on
// every rank. Zero3 gathers its shards for the comparison; the other strategies hold them whole.
template <class Accel, class Net>
void expect_matches_reference(Accel& acc, Net& net, torch::nn::Module& reference) {
  const auto full = acc.full_parameters(net);
  const double worst = max_relative_difference(*net, reference);
  fmt::print("rank {}: max relative difference to single-process training {:.3g}\n",
             acc.process_index(), worst);
  EXPECT(worst <= 1e-5);
  const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
  for (auto d : digests) EXPECT(d == digests.front());
}

template <class Accel, auto make_model = regression_model, bool users_own_optimizer = false>
void ddp_matches_single_process() {
  Accel acc(test_options());
  const int w = acc.num_processes();
  const std::int64_t per_rank = 4;
  // Different initial weights on each rank: prepare must broadcast rank 0's.
  torch::manual_seed(static_cast<std::uint64_t>(1 + acc.process_index()));
  auto net = make_model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  accel::DataLoader loader(Regression(), {.batch_size = per_rank, .shuffle = true, .seed = 5});
  auto [model, optimizer, batches] = acc.prepare(net, adam, loader);
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : batches) {
      acc.backward(torch::mse_loss(model(batch.x), batch.y));
      if (users_own_optimizer && acc.sync_gradients()) {
        adam.step();
        adam.zero_grad();
      } else if (!users_own_optimizer) {
        optimizer.step();
        optimizer.zero_grad();
      }
    }

  // The reference: one process, the same initial weights (rank 0's), batches of W x per_rank
  // over the same epoch order, GradAccum matching the accelerator's.
  torch::manual_seed(1);
  auto reference = make_model();
  torch::optim::Adam reference_adam(reference->parameters(), 0.01);
  accel::DataLoader global(Regression(), {.batch_size = per_rank * w, .shuffle = true, .seed = 5});
  int micro = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::int64_t index = 0;
    const std::int64_t total = global.size();
    for (const auto& batch : global) {
      const int window = static_cast<int>(std::min<std::int64_t>(
          Accel::accumulation_steps, total - (index / Accel::accumulation_steps) * Accel::accumulation_steps));
      (torch::mse_loss(reference->forward(batch.x), batch.y) / window).backward();
      ++index;
      if (++micro == window) {
        reference_adam.step();
        reference_adam.zero_grad();
        micro = 0;
      }
    }
  }
  expect_matches_reference(acc, net, *reference);
}

// 5 SGD steps of `acc` on this rank's rows beside 5 single-process steps on every rank's rows,
// from the same initial weights; after_backward(net) sees the averaged gradients of each step.
// before_prepare(model) runs on both models first (to freeze parameters, for instance).
template <class Accel, class AfterBackward, class BeforePrepare = void (*)(torch::nn::Sequential&)>
std::pair<torch::nn::Sequential, torch::nn::Sequential> train_beside_single_process(
    Accel& acc, AfterBackward&& after_backward,
    BeforePrepare before_prepare = [](torch::nn::Sequential&) {}) {
  torch::manual_seed(4);
  auto net = regression_model();
  torch::manual_seed(4);
  auto reference = regression_model();
  before_prepare(net);
  before_prepare(reference);
  torch::optim::SGD sgd(net->parameters(), 0.1), reference_sgd(reference->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  const Regression data;
  const int r = acc.process_index(), w = acc.num_processes();
  const auto rows = data.inputs.size(0) / w;
  for (int step = 0; step < 5; ++step) {
    acc.backward(torch::mse_loss(model(data.inputs.narrow(0, r * rows, rows)),
                                 data.targets.narrow(0, r * rows, rows)));
    after_backward(net);
    optimizer.step();
    optimizer.zero_grad();
    torch::mse_loss(reference->forward(data.inputs.narrow(0, 0, rows * w)),
                    data.targets.narrow(0, 0, rows * w)).backward();
    reference_sgd.step();
    reference_sgd.zero_grad();
  }
  return {net, reference};
}

// --- Issue cases: frozen parameters, several backwards per batch ---------------------------------

// Fine-tuning with frozen parameters trains exactly like one process on the global batch:
// a frozen parameter is in no bucket, so nothing of another parameter's gradient is touched.
template <class Accel = Ddp>
void ddp_frozen(bool find_unused, bool whole_first_layer) {
  accel::Options options = test_options();
  options.ddp.find_unused_parameters = find_unused;
  Accel acc(options);
  const auto freeze = [&](torch::nn::Sequential& net) {
    auto first = net[0]->as<torch::nn::Linear>();
    first->bias.requires_grad_(false);
    if (whole_first_layer) first->weight.requires_grad_(false);
  };
  auto [net, reference] = train_beside_single_process(acc, [](const auto&) {}, freeze);
  for (std::size_t i = 0; i < net->parameters().size(); ++i)
    EXPECT(torch::allclose(net->parameters()[i], reference->parameters()[i], 1e-5, 1e-6));
  // Unfreezing after prepare() is refused rather than trained wrongly.
  net[0]->template as<torch::nn::Linear>()->bias.requires_grad_(true);
  auto model = acc.prepare(net);
  const Regression data;
  try {
    acc.backward(torch::mse_loss(model(data.inputs), data.targets));
  } catch (const accel::Error& error) {
    const std::string what = error.what();
    EXPECT(what.find("'0.bias'") != std::string::npos);
    EXPECT(what.find("requires_grad") != std::string::npos);
    return;
  }
  throw std::runtime_error("a parameter unfrozen after prepare() was accepted");
}

// A GAN: two models and two optimizers, two backward() per batch, GradAccum<2> over a prepared
// loader. A micro-step is a batch: both optimizers step once per window, and the parameters
// equal one process's on the global batch.
struct GanSample {
  torch::Tensor real, noise;
};
struct GanData {
  torch::Tensor real, noise;
  GanData() {
    torch::manual_seed(21);
    real = torch::randn({96, 5}) + 1.0;
    noise = torch::randn({96, 2});
  }
  std::int64_t size() const { return real.size(0); }
  GanSample get(std::int64_t i) const { return {real[i], noise[i]}; }
};

// Under Zero2 a model reached by both backward() calls of a micro-step (the discriminator) is
// reduce-scattered after each, and the optimizer state lives in the shard optimizers.
template <class Par>
void gan_accumulation() {
  using Accel = accel::Accelerator<Par, accel::Fp32, accel::GradAccum<2>>;
  Accel acc(test_options());
  const int w = acc.num_processes();
  const auto make = [](torch::nn::Linear& generator, torch::nn::Linear& discriminator) {
    torch::manual_seed(8);
    generator = torch::nn::Linear(2, 5);
    discriminator = torch::nn::Linear(5, 1);
  };
  // One GAN step on a batch, the same code for the accelerated and the reference run.
  const auto step = [](auto& g, auto& d, auto& g_opt, auto& d_opt, const GanSample& batch,
                       auto&& backward) {
    const auto ones = torch::ones({batch.real.size(0), 1});
    const auto fake = g(batch.noise);
    backward(torch::mse_loss(d(batch.real), ones) + torch::mse_loss(d(fake.detach()), 0 * ones));
    d_opt.step();
    d_opt.zero_grad();
    backward(torch::mse_loss(d(fake), ones));
    g_opt.step();
    g_opt.zero_grad();
  };

  torch::nn::Linear g_net{nullptr}, d_net{nullptr};
  make(g_net, d_net);
  torch::optim::Adam g_adam(g_net->parameters(), 0.01), d_adam(d_net->parameters(), 0.01);
  accel::DataLoader loader(GanData(), {.batch_size = 96 / (8 * w)});  // 8 batches per rank
  auto [g, d, g_opt, d_opt, batches] = acc.prepare(g_net, d_net, g_adam, d_adam, loader);
  EXPECT(batches.size() == 8);
  for (const auto& batch : batches)
    step(g, d, g_opt, d_opt, batch, [&](const torch::Tensor& loss) { acc.backward(loss); });
  const auto adam_steps = [&](torch::optim::Adam& adam) {
    const torch::optim::Optimizer* holder = &adam;
    if constexpr (Par::shards_optimizer_state) {
      EXPECT(adam.state().empty());
      holder = accel::testing::internals(acc).strategy().shard_optimizer(adam);
      EXPECT(holder != nullptr);
    }
    EXPECT(!holder->state().empty());
    return static_cast<const torch::optim::AdamParamState&>(*holder->state().begin()->second).step();
  };
  fmt::print("rank {}: generator steps {}, discriminator steps {}\n", acc.process_index(),
             adam_steps(g_adam), adam_steps(d_adam));
  EXPECT(adam_steps(g_adam) == 4 && adam_steps(d_adam) == 4);

  // The reference: one process, batches of every rank's rows, windows of 2 by hand.
  torch::nn::Linear g_ref{nullptr}, d_ref{nullptr};
  make(g_ref, d_ref);
  torch::optim::Adam g_ref_adam(g_ref->parameters(), 0.01), d_ref_adam(d_ref->parameters(), 0.01);
  struct WindowEnd {
    torch::optim::Adam& adam;
    bool* at_end;
    void step() { if (*at_end) adam.step(); }
    void zero_grad() { if (*at_end) adam.zero_grad(); }
  };
  bool at_end = false;
  WindowEnd g_window{g_ref_adam, &at_end}, d_window{d_ref_adam, &at_end};
  accel::DataLoader global(GanData(), {.batch_size = 96 / 8});
  int index = 0;
  for (const auto& batch : global) {
    at_end = ++index % 2 == 0;
    step(g_ref, d_ref, g_window, d_window, batch,
         [](const torch::Tensor& loss) { (loss / 2).backward(); });
  }
  const auto full_g = acc.full_parameters(g_net);  // Zero3 gathers its shards; others: no-op
  const auto full_d = acc.full_parameters(d_net);
  for (auto* pair : {&g_net, &d_net}) {
    auto& ref = pair == &g_net ? g_ref : d_ref;
    for (std::size_t i = 0; i < (*pair)->parameters().size(); ++i)
      EXPECT(torch::allclose((*pair)->parameters()[i], ref->parameters()[i], 1e-4, 1e-5));
  }
}

}  // namespace accel_test
