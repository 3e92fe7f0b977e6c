// Token-weighted accumulation across processes (docs/how-to/accumulation.md, "Token-weighted
// accumulation"): each rank and micro-step passes backward(loss_sum, tokens) for padded sequences
// of very different lengths (some micro-batches padding only, one rank a whole window without a
// token), and each window's update must be one process's on the concatenated batch of all the
// window's tokens, under every strategy, with and without accumulation, clipping and loss
// scaling. The classic bug (the mean over micro-batches and ranks of each one's mean loss) is
// computed too, and must be far from it, so that the comparison would catch it.
#include "scenario.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../loss_scaled_fp32.hpp"

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_tokens {

namespace {

using accel_test::test_options;

constexpr std::int64_t vocab = 11, seq_len = 7, rows = 2, windows = 3;

torch::nn::Sequential token_model() {
  torch::manual_seed(21);
  return torch::nn::Sequential(torch::nn::Embedding(vocab, 6), torch::nn::Linear(6, 8),
                               torch::nn::Functional(torch::tanh), torch::nn::Linear(8, vocab));
}

struct MicroBatch {
  torch::Tensor x, y, mask;  // [rows, seq_len]; mask 1 on real tokens
  std::int64_t tokens = 0;
};

// Rank r's micro-batch at micro-step m of window w (the same on every rank that asks, whatever
// the world size): random lengths 0..seq_len, except that rank 0 has no token in the first
// micro-batch of window 0 nor in any of window 1, and the last rank's sequences are full.
MicroBatch micro_batch(int w, int m, int r, int world) {
  torch::manual_seed(static_cast<std::uint64_t>(1000 + 100 * w + 10 * m + r));
  torch::Tensor lengths = torch::randint(0, seq_len + 1, {rows}, torch::kLong);
  if (r == 0 && ((w == 0 && m == 0) || w == 1)) lengths.zero_();
  if (r == world - 1) lengths.fill_(seq_len);
  const torch::Tensor mask = (torch::arange(seq_len).unsqueeze(0) < lengths.unsqueeze(1)).to(torch::kFloat);
  MicroBatch batch{torch::randint(1, vocab, {rows, seq_len}, torch::kLong) * mask.to(torch::kLong),
                   torch::randint(0, vocab, {rows, seq_len}, torch::kLong), mask};
  batch.tokens = mask.sum().item<std::int64_t>();
  return batch;
}

torch::Tensor masked_loss_sum(const torch::Tensor& logits, const MicroBatch& batch) {
  namespace F = torch::nn::functional;
  const torch::Tensor per_token =
      F::cross_entropy(logits.reshape({-1, vocab}), batch.y.reshape({-1}),
                       F::CrossEntropyFuncOptions().reduction(torch::kNone));
  return (per_token * batch.mask.reshape({-1})).sum();
}

torch::optim::SGD make_sgd(torch::nn::Sequential& net) {
  return torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.5).momentum(0.5));
}

// One process: each window's micro-batches of every rank concatenated into one batch, its loss
// the masked sum divided by its tokens; or (token_weighted false) the classic bug: every
// micro-batch's mean loss, averaged over micro-steps and ranks. Returns the clipped norms.
std::vector<double> train_reference(torch::nn::Sequential& net, int steps, int world, double clip,
                                    bool token_weighted) {
  auto sgd = make_sgd(net);
  std::vector<double> norms;
  for (int w = 0; w < windows; ++w) {
    std::vector<torch::Tensor> x, y, mask;
    for (int m = 0; m < steps; ++m)
      for (int r = 0; r < world; ++r) {
        const MicroBatch b = micro_batch(w, m, r, world);
        if (!token_weighted)
          (masked_loss_sum(net->forward(b.x), b) / std::max<std::int64_t>(b.tokens, 1) /
           static_cast<double>(steps * world))
              .backward();
        x.push_back(b.x);
        y.push_back(b.y);
        mask.push_back(b.mask);
      }
    if (token_weighted) {
      const MicroBatch all{torch::cat(x), torch::cat(y), torch::cat(mask)};
      (masked_loss_sum(net->forward(all.x), all) / all.mask.sum()).backward();
    }
    norms.push_back(torch::nn::utils::clip_grad_norm_(net->parameters(), clip));
    sgd.step();
    sgd.zero_grad();
  }
  return norms;
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

// `windows` windows of GradAccum<N> micro-steps, each in an accumulate() scope: clip_grad_norm
// (clip 0: measured only, at a bound never reached) and an SGD step, against one process.
template <class Par, class Prec, int N>
void token_weighted_matches_one_batch(double clip = 0) {
  accel::Options options = test_options();
  options.loss_scaling.init_scale = 1024;  // Fp16's scaler (LossScaledFp32): sums times 1024
  accel::Accelerator<Par, Prec, accel::GradAccum<N>> acc(options);
  const int world = acc.num_processes(), rank = acc.process_index();
  const double bound = clip > 0 ? clip : 1e9;
  auto net = token_model();
  auto user_sgd = make_sgd(net);
  auto [model, optimizer] = acc.prepare(net, user_sgd);
  std::vector<double> norms;
  std::int64_t mine = 0;
  for (int w = 0; w < windows; ++w)
    for (int m = 0; m < N; ++m) {
      auto step = acc.accumulate();
      const MicroBatch b = micro_batch(w, m, rank, world);
      mine += b.tokens;
      acc.backward(masked_loss_sum(model(b.x), b), b.tokens);
      const double norm = acc.clip_grad_norm(bound);
      if (acc.sync_gradients()) norms.push_back(norm);
      optimizer.step();
      EXPECT(!acc.optimizer_step_was_skipped());
      optimizer.zero_grad();
    }
  EXPECT(acc.completed_steps() == windows);

  auto start = token_model();
  auto reference = token_model();
  const auto reference_norms = train_reference(reference, N, world, bound, true);
  auto mean_of_means = token_model();
  (void)train_reference(mean_of_means, N, world, bound, false);
  const double bug = update_difference(*mean_of_means, *reference, *start);
  EXPECT(bug > 0.05);  // the data tells the two apart
  {
    const auto full = acc.full_parameters(net);
    const double worst = update_difference(*net, *reference, *start);
    fmt::print("rank {}: {} tokens here; update vs one batch of all tokens {:.3g} (mean of means "
               "{:.3g}); norms {:.4g}\n",
               rank, mine, worst, bug, fmt::join(norms, ", "));
    EXPECT(worst <= 1e-5);
    const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
    for (const auto& d : digests) EXPECT(d == digests.front());
  }
  EXPECT(norms.size() == reference_norms.size());
  for (std::size_t i = 0; i < norms.size(); ++i)
    EXPECT(std::abs(norms[i] - reference_norms[i]) <= 1e-5 * reference_norms[i]);
  if (clip > 0) EXPECT(*std::max_element(norms.begin(), norms.end()) > clip);  // it clipped
}

using accel_test::error_of;

// The errors, on every rank alike: a window of mean and token-sum losses (either order), a
// negative count, a token sum after the window was divided, a window without a token on any
// rank (found in the all-reduce of the counts: every rank fails).
void token_weighted_errors() {
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> acc(test_options());
  const int world = acc.num_processes(), rank = acc.process_index();
  auto net = token_model();
  auto user_sgd = make_sgd(net);
  auto [model, optimizer] = acc.prepare(net, user_sgd);
  const MicroBatch b = micro_batch(2, 0, rank, world);
  const auto loss_sum = [&] { return masked_loss_sum(model(b.x), b); };
  const auto mean = [&] { return loss_sum() / std::max<std::int64_t>(b.tokens, 1); };
  const auto expect_error = [](const std::string& message, const std::string& start) {
    if (message.rfind(start, 0) != 0) fmt::print(stderr, "unexpected error: '{}'\n", message);
    EXPECT(message.rfind(start, 0) == 0);
  };
  {
    auto step = acc.accumulate();
    expect_error(error_of([&] { acc.backward(loss_sum(), -1); }),
                 "accel: backward(loss_sum, tokens): tokens is -1");
  }
  {
    auto step = acc.accumulate();
    acc.backward(loss_sum(), b.tokens);
    optimizer.step();
    expect_error(error_of([&] { acc.backward(loss_sum(), b.tokens); }),
                 "accel: backward(loss_sum, tokens) after this window's gradients were divided");
    optimizer.zero_grad();
  }
  {
    auto step = acc.accumulate();
    acc.backward(mean());
    expect_error(error_of([&] { acc.backward(loss_sum(), b.tokens); }),
                 "accel: backward(loss_sum, tokens) in an accumulation window that already "
                 "called backward(loss)");
  }
  {
    auto step = acc.accumulate();
    acc.backward(mean());
    optimizer.step();
    optimizer.zero_grad();
  }
  {
    auto step = acc.accumulate();
    acc.backward(loss_sum(), b.tokens);
    expect_error(error_of([&] { acc.backward(mean()); }),
                 "accel: backward(loss) in an accumulation window that already called "
                 "backward(loss_sum, tokens)");
  }
  {
    auto step = acc.accumulate();
    acc.backward(loss_sum(), 0);
    optimizer.step();
    optimizer.zero_grad();
  }
  for (int m = 0; m < 2; ++m) {
    auto step = acc.accumulate();
    acc.backward(loss_sum() * 0, 0);
    if (m == 1)
      expect_error(error_of([&] { optimizer.step(); }),
                   fmt::format("accel: backward(loss_sum, tokens): this accumulation window "
                               "counted 0 tokens on {} rank(s)",
                               world));
  }
  // Still one model on every rank.
  const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
  for (const auto& d : digests) EXPECT(d == digests.front());
}

// Counts beyond std::int64_t fail with an error naming them, on every rank alike, instead of
// wrapping (3 ranks of 6148914691236517206 tokens summed to 2, and the gradients were divided by
// 2): an unsigned count of 2^63, a window's counts on one rank, the window's counts over the ranks.
void token_count_overflow() {
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>> acc(test_options());
  const int world = acc.num_processes(), rank = acc.process_index();
  auto net = token_model();
  auto user_sgd = make_sgd(net);
  auto [model, optimizer] = acc.prepare(net, user_sgd);
  const MicroBatch b = micro_batch(2, 0, rank, world);
  const auto loss_sum = [&] { return masked_loss_sum(model(b.x), b); };
  const auto expect_error = [](const std::string& message, const std::string& start) {
    if (message.rfind(start, 0) != 0) fmt::print(stderr, "unexpected error: '{}'\n", message);
    EXPECT(message.rfind(start, 0) == 0);
  };
  constexpr std::int64_t largest = std::numeric_limits<std::int64_t>::max();
  const auto counts_of = [&](std::int64_t each) {
    std::string listed;
    for (int r = 0; r < world; ++r) listed += fmt::format("{}{} on rank {}", r ? ", " : "", each, r);
    return fmt::format("accel: backward(loss_sum, tokens): this accumulation window's token "
                       "counts ({}) add up to more than {}",
                       listed, largest);
  };
  {
    auto step = acc.accumulate();
    expect_error(error_of([&] { acc.backward(loss_sum(), std::uint64_t{1} << 63); }),
                 "accel: backward(loss_sum, tokens): tokens is 9223372036854775808, more than");
  }
  {
    auto step = acc.accumulate();
    acc.backward(loss_sum(), b.tokens);
    optimizer.step();
    optimizer.zero_grad();
  }
  {
    auto step = acc.accumulate();
    acc.backward(loss_sum(), largest);
  }
  {
    auto step = acc.accumulate();
    expect_error(error_of([&] { acc.backward(loss_sum(), 1); }),
                 fmt::format("accel: backward(loss_sum, tokens): tokens is 1 and this "
                             "accumulation window already counted {} on this rank",
                             largest));
    // Every rank counted the largest: the sum over the ranks overflows.
    expect_error(error_of([&] { optimizer.step(); }), counts_of(largest));
    optimizer.zero_grad();
  }
  for (int m = 0; m < 2; ++m) {
    auto step = acc.accumulate();
    acc.backward(loss_sum(), m == 0 ? std::int64_t{6148914691236517206} : 0);
    if (m == 0) continue;
    expect_error(error_of([&] { optimizer.step(); }), counts_of(6148914691236517206));
    optimizer.zero_grad();
  }
  // Still one model on every rank.
  const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
  for (const auto& d : digests) EXPECT(d == digests.front());
}

}  // namespace

int run(int argc, char** argv) {
  using accel::Ddp, accel::Zero2, accel::Zero3, accel::Fp32;
  using accel_test::LossScaledFp32;
  using ShardGradOp = accel::Fsdp<accel::ShardGradOp>;
  using HybridShard = accel::Fsdp<accel::HybridShard>;
  return accel_test::run_scenario(
      argc, argv,
      {{"tokens_ddp", [] { token_weighted_matches_one_batch<Ddp, Fp32, 1>(); }},
       {"tokens_ddp_accum", [] { token_weighted_matches_one_batch<Ddp, Fp32, 3>(); }},
       {"tokens_zero2", [] { token_weighted_matches_one_batch<Zero2, Fp32, 1>(); }},
       {"tokens_zero2_accum", [] { token_weighted_matches_one_batch<Zero2, Fp32, 3>(); }},
       {"tokens_zero3", [] { token_weighted_matches_one_batch<Zero3, Fp32, 1>(); }},
       {"tokens_zero3_accum", [] { token_weighted_matches_one_batch<Zero3, Fp32, 3>(); }},
       {"tokens_fsdp_shard_grad_op_accum_clip",
        [] { token_weighted_matches_one_batch<ShardGradOp, Fp32, 2>(0.2); }},
       {"tokens_ddp_accum_loss_scaled", [] { token_weighted_matches_one_batch<Ddp, LossScaledFp32, 3>(); }},
       {"tokens_zero3_accum_loss_scaled_clip",
        [] { token_weighted_matches_one_batch<Zero3, LossScaledFp32, 2>(0.2); }},
       {"tokens_fsdp_hybrid_shard_accum", [] { token_weighted_matches_one_batch<HybridShard, Fp32, 2>(); }},
       {"tokens_errors", token_weighted_errors},
       {"tokens_count_overflow", token_count_overflow}});
}

}  // namespace dist_worker_tokens
