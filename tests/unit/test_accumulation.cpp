// GradAccum<N>: N micro-batches make the same update as one batch N times larger, including
// the shorter last window of an epoch; step/zero_grad/scheduler are no-ops mid-window.
// Token-weighted accumulation (backward(loss_sum, tokens)): a window's update is one batch's of
// all its tokens, however unevenly its micro-batches hold them.
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../loss_scaled_fp32.hpp"
#include "helpers.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_accumulation {

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
  // 40 samples: a window of 4 micro-batches, then a window of 1 (8 samples), every epoch; 56
  // samples: 4, then 3 (24 samples), where the loss is scaled by 1/3, not by 1/4 (a window of
  // one is not scaled at all, so it alone would not tell). The reference steps over 32 then the
  // rest; Adam amplifies any mis-scaling of the update, SGD shows it in proportion.
  for (const std::int64_t samples : {40, 56}) {
    CAPTURE(samples);
    auto accumulated = train<Accum4, torch::optim::Adam>(samples, 8, 3);
    auto reference = train<NoAccum, torch::optim::Adam>(samples, 32, 3);
    CHECK(accel_test::max_relative_difference(*accumulated, *reference) <= 1e-6);
    auto sgd_accumulated = train<Accum4, torch::optim::SGD>(samples, 8, 3);
    auto sgd_reference = train<NoAccum, torch::optim::SGD>(samples, 32, 3);
    CHECK(accel_test::max_relative_difference(*sgd_accumulated, *sgd_reference) <= 1e-6);
  }
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
    window.push_back(accelerator.gradient_state().length);
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
  CHECK(accelerator.gradient_state().position == 4);
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

TEST_CASE("under Zero2 a window whose gradients no prepared optimizer used stops the next "
          "backward()") {
  accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<2>> accelerator;
  auto net = accel_test::seeded_mlp();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const Regression data(4);
  const auto loss = [&] { return torch::mse_loss(model(data.inputs), data.targets); };
  // Without a loader each backward() is a micro-step: windows of two.
  for (int window = 0; window < 2; ++window) {  // the right doors: stepped, or dropped
    accelerator.backward(loss());
    accelerator.backward(loss());
    optimizer.step();
    optimizer.zero_grad();
    accelerator.backward(loss());
    accelerator.backward(loss());
    optimizer.zero_grad();  // a window dropped on purpose
  }
  {
    auto micro_step = accelerator.accumulate();
    accelerator.backward(loss());
  }
  {
    auto micro_step = accelerator.accumulate();  // ends the window (micro-step 10)
    accelerator.backward(loss());
    accelerator.backward(loss());  // a second loss on the same micro-step (a GAN's) is fine
  }
  sgd.step();  // the torch optimizer itself: no gradient reaches it
  sgd.zero_grad();
  CHECK_THROWS_WITH_AS(accelerator.backward(loss()),
                       doctest::Contains("the gradients of the last window (micro-step 10) were "
                                         "neither applied nor dropped by a prepared optimizer: "
                                         "under Zero2 they live in accel's shards"),
                       accel::Error);
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
  CHECK(accelerator.gradient_state().position == 2);
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

// --- Token-weighted accumulation -----------------------------------------------------------------

namespace {

constexpr std::int64_t vocab = 11, seq_len = 7;

// Padded sequences of very different lengths (some of padding only): a sample's loss counts
// where mask is 1.
struct Sequence {
  torch::Tensor x, y, mask;
};
struct Sequences {
  std::vector<std::int64_t> lengths{0, 0, 7, 1, 5, 0, 2, 7, 7, 3, 0, 6};
  std::int64_t size() const { return static_cast<std::int64_t>(lengths.size()); }
  Sequence get(std::int64_t i) const {
    torch::manual_seed(static_cast<std::uint64_t>(500 + i));
    const torch::Tensor mask =
        (torch::arange(seq_len) < lengths[static_cast<std::size_t>(i)]).to(torch::kFloat);
    return {torch::randint(1, vocab, {seq_len}, torch::kLong) * mask.to(torch::kLong),
            torch::randint(0, vocab, {seq_len}, torch::kLong), mask};
  }
};

torch::nn::Sequential tiny_language_model() {
  torch::manual_seed(21);
  return torch::nn::Sequential(torch::nn::Embedding(vocab, 6), torch::nn::Linear(6, 8),
                               torch::nn::Functional(torch::tanh), torch::nn::Linear(8, vocab));
}

// The cross-entropy summed over the real tokens (mask 1), not averaged.
torch::Tensor masked_loss_sum(const torch::Tensor& logits, const Sequence& batch) {
  namespace F = torch::nn::functional;
  const torch::Tensor per_token =
      F::cross_entropy(logits.reshape({-1, vocab}), batch.y.reshape({-1}),
                       F::CrossEntropyFuncOptions().reduction(torch::kNone));
  return (per_token * batch.mask.reshape({-1})).sum();
}

// Two epochs of GradAccum<4> over 6 batches of 2 (windows of 4 and 2 batches), SGD with momentum.
template <class Accel>
torch::nn::Sequential train_token_weighted() {
  accel::Options options;
  options.loss_scaling.init_scale = 1024;
  Accel accelerator(options);
  auto net = tiny_language_model();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.5).momentum(0.5));
  accel::DataLoader loader(Sequences(), {.batch_size = 2});
  auto [model, optimizer, batches] = accelerator.prepare(net, sgd, loader);
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : batches) {
      accelerator.backward(masked_loss_sum(model(batch.x), batch),
                           batch.mask.sum().template item<std::int64_t>());
      optimizer.step();
      optimizer.zero_grad();
    }
  return net;
}

// Plain libtorch on the same windows: each window's batches concatenated into one batch, its
// loss the masked sum over all of them divided by their tokens; or (token_weighted false) the
// classic bug, the mean over the window's micro-batches of each one's mean loss.
torch::nn::Sequential train_reference(bool token_weighted) {
  auto net = tiny_language_model();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.5).momentum(0.5));
  const Sequences data;
  const auto batch_of = [&](std::int64_t first, std::int64_t count) {
    std::vector<torch::Tensor> x, y, mask;
    for (std::int64_t i = first; i < first + count; ++i) {
      const Sequence s = data.get(i);
      x.push_back(s.x);
      y.push_back(s.y);
      mask.push_back(s.mask);
    }
    return Sequence{torch::stack(x), torch::stack(y), torch::stack(mask)};
  };
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& [first, batches] : {std::pair<std::int64_t, std::int64_t>{0, 4}, {8, 2}}) {
      if (token_weighted) {
        const Sequence window = batch_of(first, 2 * batches);
        (masked_loss_sum(net->forward(window.x), window) / window.mask.sum()).backward();
      } else {
        for (std::int64_t b = 0; b < batches; ++b) {
          const Sequence micro = batch_of(first + 2 * b, 2);
          (masked_loss_sum(net->forward(micro.x), micro) / micro.mask.sum().clamp_min(1) /
           static_cast<double>(batches))
              .backward();
        }
      }
      sgd.step();
      sgd.zero_grad();
    }
  return net;
}

// max |(a - start) - (b - start)| / max |b - start| over the parameters: how far two updates are.
double update_difference(torch::nn::Module& a, torch::nn::Module& b, torch::nn::Module& start) {
  const auto pa = a.parameters(), pb = b.parameters(), p0 = start.parameters();
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const torch::Tensor db = pb[i] - p0[i];
    worst = std::max(worst, ((pa[i] - p0[i] - db).abs().max() / db.abs().max()).item<double>());
  }
  return worst;
}

// The message of the accel::Error that `run` throws ("" if none).
template <class Run>
std::string error_of(Run&& run) {
  try {
    run();
  } catch (const accel::Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("backward(loss_sum, tokens): each window's update is one batch's of all its tokens") {
  auto start = tiny_language_model();
  auto reference = train_reference(true);
  auto mean_of_means = train_reference(false);
  // The data makes the classic bug visible: micro-batches of 0 to 14 tokens.
  REQUIRE(update_difference(*mean_of_means, *reference, *start) > 0.05);
  using Plain = accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<4>>;
  auto plain = train_token_weighted<Plain>();
  CHECK(update_difference(*plain, *reference, *start) <= 1e-5);
  // Fp16's loss scaler (in fp32 arithmetic): scaled sums, unscaled once, divided once.
  using Scaled = accel::Accelerator<accel::Zero2, accel_test::LossScaledFp32, accel::GradAccum<4>>;
  auto scaled = train_token_weighted<Scaled>();
  CHECK(update_difference(*scaled, *reference, *start) <= 1e-5);
}

TEST_CASE("backward(loss_sum, tokens): clip_grad_norm measures the divided gradients") {
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> accelerator;
  auto net = tiny_language_model();
  auto reference = tiny_language_model();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  torch::optim::SGD reference_sgd(reference->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const Sequences data;
  const Sequence a = data.get(2), b = data.get(4);  // 7 and 5 tokens
  for (const Sequence* s : {&a, &b}) {
    auto step = accelerator.accumulate();
    accelerator.backward(masked_loss_sum(model(s->x.unsqueeze(0)), *s),
                         s->mask.sum().item<std::int64_t>());
  }
  const double norm = accelerator.clip_grad_norm(1e9);
  const Sequence both{torch::stack({a.x, b.x}), torch::stack({a.y, b.y}),
                      torch::stack({a.mask, b.mask})};
  (masked_loss_sum(reference->forward(both.x), both) / 12.0).backward();
  const double expected = torch::nn::utils::clip_grad_norm_(reference->parameters(), 1e9);
  CHECK(std::abs(norm - expected) <= 1e-5 * expected);
  // Divided once: the step after clip_grad_norm does not divide again.
  optimizer.step();
  reference_sgd.step();
  CHECK(accel_test::max_relative_difference(*net, *reference) <= 1e-6);
}

TEST_CASE("backward(loss_sum, tokens): the errors") {
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> accelerator;
  auto net = tiny_language_model();
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const Sequence s = Sequences().get(2);
  const auto loss_sum = [&] { return masked_loss_sum(model(s.x.unsqueeze(0)), s); };

  {  // window 1: a negative count; then a token sum after the window's division
    auto step = accelerator.accumulate();
    CHECK(error_of([&] { accelerator.backward(loss_sum(), -3); }) ==
          "accel: backward(loss_sum, tokens): tokens is -3; it is the number of items (e.g. "
          "non-padding target tokens) loss_sum adds up, 0 or more");
  }
  {
    auto step = accelerator.accumulate();
    accelerator.backward(loss_sum(), 7);
    optimizer.step();
    CHECK(error_of([&] { accelerator.backward(loss_sum(), 7); })
              .find("after this window's gradients were divided by its token count") !=
          std::string::npos);
    optimizer.zero_grad();
  }
  {  // window 2: a mean loss, then a token sum (both named)
    auto step = accelerator.accumulate();
    accelerator.backward(loss_sum() / 7);
    CHECK(error_of([&] { accelerator.backward(loss_sum(), 7); })
              .starts_with("accel: backward(loss_sum, tokens) in an accumulation window that "
                           "already called backward(loss)"));
  }
  {
    auto step = accelerator.accumulate();
    accelerator.backward(loss_sum() / 7);
    optimizer.step();
    optimizer.zero_grad();
  }
  {  // window 3: a token sum, then a mean loss
    auto step = accelerator.accumulate();
    accelerator.backward(loss_sum(), 7);
    CHECK(error_of([&] { accelerator.backward(loss_sum() / 7); })
              .starts_with("accel: backward(loss) in an accumulation window that already called "
                           "backward(loss_sum, tokens)"));
    // Mid-window, a checkpoint cannot keep the window's token count yet: refused.
    const auto folder = std::filesystem::temp_directory_path() /
                        fmt::format("accel_tokens_mid_window_{}", ::getpid());
    CHECK(error_of([&] { accelerator.save_state(folder); })
              .starts_with("accel: save_state() in the middle of an accumulation window of "
                           "backward(loss_sum, tokens)"));
    std::filesystem::remove_all(folder);
  }
  {
    auto step = accelerator.accumulate();
    accelerator.backward(loss_sum(), 0);
    optimizer.step();
    optimizer.zero_grad();
  }
  for (int micro = 0; micro < 2; ++micro) {  // window 4: no token at all
    auto step = accelerator.accumulate();
    accelerator.backward(loss_sum() * 0, 0);
    if (micro == 1)
      CHECK(error_of([&] { optimizer.step(); })
                .starts_with("accel: backward(loss_sum, tokens): this accumulation window "
                             "counted 0 tokens on 1 rank(s)"));
  }
}

}  // namespace unit_accumulation
