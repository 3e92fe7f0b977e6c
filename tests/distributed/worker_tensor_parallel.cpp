// Tensor parallelism (Parallel<P, TensorParallel<2>>, docs/how-to/tensor-parallel.md) against
// one process on the global batch: two column -> activation -> row pairs, a frozen Linear, a
// LayerNorm and a plain head, trained with AdamW, GradAccum<2> and clip_grad_norm, the full
// weights written through full_parameters() halfway; on 2 ranks (one tensor-parallel group) and
// on 4 (two groups, the outer policy across them): Ddp, and the sharded outer policies (Zero2,
// Zero3 and the Fsdp names), whose flat parameters are made of the slices; under Bf16 (Ddp, and
// Zero3 on 4) within bf16's tolerance. With sequence parallelism (the same model with its
// LayerNorm and residual stream split by sequence) on 2 and 4 ranks under Ddp and Zero3. A fused
// column layer's split (FusedOutputs). The refusals: a world size the degree does not divide, a
// layer it does not divide, and checkpoints.
#include <accel/checkpoints.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "single_process.hpp"

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_tensor_parallel {

namespace fs = std::filesystem;

namespace {

using TensorParallel2 =
    accel::Accelerator<accel::Parallel<accel::Ddp, accel::TensorParallel<2>>, accel::Fp32,
                       accel::GradAccum<2>>;

// A transformer block's shape in miniature: residual MLPs of a column and a row layer each.
struct TinyImpl : torch::nn::Module {
  TinyImpl()
      : frozen(register_module("frozen", torch::nn::Linear(5, 8))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})))),
        up1(register_module("up1", accel::ColumnParallelLinear(8, 16))),
        down1(register_module("down1", accel::RowParallelLinear(16, 8))),
        up2(register_module("up2", accel::ColumnParallelLinear(
                                       torch::nn::LinearOptions(8, 12).bias(false)))),
        down2(register_module("down2", accel::RowParallelLinear(12, 8))),
        head(register_module("head", torch::nn::Linear(8, 1))) {
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    // In fp32: libtorch 1.13's CPU LayerNorm refuses bf16 input beside fp32 weights (Bf16 below).
    torch::Tensor h = norm(torch::tanh(frozen(x)).to(torch::kFloat));
    h = h + down1(torch::tanh(up1(h)));
    h = h + down2(torch::gelu(up2(h)));
    return head(h);
  }
  torch::nn::Linear frozen;
  torch::nn::LayerNorm norm;
  accel::ColumnParallelLinear up1;
  accel::RowParallelLinear down1;
  accel::ColumnParallelLinear up2;
  accel::RowParallelLinear down2;
  torch::nn::Linear head;
};
TORCH_MODULE(Tiny);

// Tiny with sequence parallelism: the batch's samples as one sequence of tokens ([1, batch, 8]:
// every layer acts token by token), which the LayerNorm and the residual stream hold 1/N of
// between the split layers; the head reads the whole sequence again.
struct TinySequenceImpl : torch::nn::Module {
  TinySequenceImpl()
      : frozen(register_module("frozen", torch::nn::Linear(5, 8))),
        norm(register_module("norm", accel::SequenceParallel<torch::nn::LayerNorm>(
                                         torch::nn::LayerNormOptions({8})))),
        up1(register_module("up1", accel::ColumnParallelLinear(8, 16))),
        down1(register_module("down1", accel::RowParallelLinear(16, 8))),
        up2(register_module("up2", accel::ColumnParallelLinear(
                                       torch::nn::LinearOptions(8, 12).bias(false)))),
        down2(register_module("down2", accel::RowParallelLinear(12, 8))),
        head(register_module("head", torch::nn::Linear(8, 1))),
        scatter(register_module("scatter", accel::ScatterSequence())),
        gather(register_module("gather", accel::GatherSequence())) {
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h =
        norm(scatter(torch::tanh(frozen(x)).to(torch::kFloat).unsqueeze(0)));
    h = h + down1(torch::tanh(up1(h)));
    h = h + down2(torch::gelu(up2(h)));
    return head(gather(h)).squeeze(0);
  }
  torch::nn::Linear frozen;
  accel::SequenceParallel<torch::nn::LayerNorm> norm;
  accel::ColumnParallelLinear up1;
  accel::RowParallelLinear down1;
  accel::ColumnParallelLinear up2;
  accel::RowParallelLinear down2;
  torch::nn::Linear head;
  accel::ScatterSequence scatter;
  accel::GatherSequence gather;
};
TORCH_MODULE(TinySequence);

// Unprepared, the layers are Linear: the same numbers from the same seed, the same output.
void expect_linear_before_prepare() {
  torch::manual_seed(3);
  torch::nn::Linear linear(8, 12);
  torch::manual_seed(3);
  accel::ColumnParallelLinear column(8, 12);
  torch::manual_seed(3);
  accel::RowParallelLinear row(8, 12);
  const torch::Tensor x = torch::randn({4, 8});
  EXPECT(torch::equal(column->weight, linear->weight) && torch::equal(column->bias, linear->bias));
  EXPECT(torch::equal(row->weight, linear->weight) && torch::equal(row->bias, linear->bias));
  EXPECT(torch::equal(column(x), linear(x)) && torch::equal(row(x), linear(x)));
  EXPECT(!column->is_split() && !row->is_split());
}

// 2 ranks: one tensor-parallel group; 4: two, Ddp across them. The loader deals a batch per
// group; the reference takes every group's batch at once, in the same precision. Within
// `tolerance` of it (relative, parameters and clipped norms alike), and the same on every rank.
template <class Accel, class Model = Tiny>
void matches_one_process(double tolerance) {
  expect_linear_before_prepare();
  Accel acc(accel_test::test_options());
  const int groups = acc.num_processes() / 2;
  // 24 micro-batches of 96 samples, 12 steps, whatever the number of groups.
  const std::int64_t per_group = 4 / groups;
  // Different initial weights on each rank: prepare must start every rank from rank 0's.
  torch::manual_seed(static_cast<std::uint64_t>(1 + acc.process_index()));
  Model net;
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.01));
  accel::DataLoader loader(accel_test::Regression(),
                           {.batch_size = per_group, .shuffle = true, .seed = 5});
  auto [model, optimizer, batches] = acc.prepare(net, adamw, loader);
  // Under Zero3 and Fsdp<FullShard> the parameters are zero-element at rest: the slices' shapes
  // are read inside full_parameters() below.
  constexpr bool at_rest_empty = accel::shards_parameters_v<typename Accel::parallelism_policy>;
  EXPECT(net->up1->is_split() && net->down2->is_split());
  if constexpr (!at_rest_empty) {
    EXPECT(net->up1->weight.size(0) == 8 && net->down1->weight.size(1) == 8);
    EXPECT(net->up2->weight.size(0) == 6 && net->down2->bias.size(0) == 8);
  } else if (acc.num_processes() > 2) {
    EXPECT(net->up1->weight.numel() == 0);
  }
  std::vector<double> norms;
  for (const auto& batch : batches) {
    acc.backward(torch::mse_loss(model(batch.x), batch.y));
    if (acc.sync_gradients()) norms.push_back(acc.clip_grad_norm(0.5));
    optimizer.step();
    optimizer.zero_grad();
    if (acc.sync_gradients() && norms.size() == 2) {
      // Written through the full weights, which training must then go on from.
      const auto full = acc.full_parameters(net);
      EXPECT(net->up1->weight.size(0) == 16 && net->down1->weight.size(1) == 16);
      torch::NoGradGuard no_grad;
      net->up1->weight.mul_(0.5);
      net->down1->weight.mul_(0.5);
    }
  }

  torch::manual_seed(1);
  Model reference;
  torch::optim::AdamW reference_adamw(reference->parameters(),
                                      torch::optim::AdamWOptions(0.01).weight_decay(0.01));
  accel::DataLoader global(accel_test::Regression(),
                           {.batch_size = per_group * groups, .shuffle = true, .seed = 5});
  std::vector<double> reference_norms;
  int micro = 0;
  for (const auto& batch : global) {
    torch::Tensor output;
    {
      // The one process computes as the Accelerator's precision does (Bf16: under autocast).
      const accel::precision::Autocast<typename Accel::precision_policy> autocast(torch::kCPU);
      output = accel::precision::outputs_to_fp32<typename Accel::precision_policy>(
          reference(batch.x));
    }
    (torch::mse_loss(output, batch.y) / 2).backward();
    if (++micro % 2 == 0) {
      reference_norms.push_back(
          torch::nn::utils::clip_grad_norm_(reference->parameters(), 0.5));
      reference_adamw.step();
      reference_adamw.zero_grad();
      if (reference_norms.size() == 2) {
        torch::NoGradGuard no_grad;
        reference->up1->weight.mul_(0.5);
        reference->down1->weight.mul_(0.5);
      }
    }
  }
  EXPECT(norms.size() == reference_norms.size() && !norms.empty());
  double worst_norm = 0;
  for (std::size_t i = 0; i < norms.size(); ++i)
    worst_norm = std::max(worst_norm, std::abs(norms[i] - reference_norms[i]) / reference_norms[i]);
  EXPECT(reference_norms.front() > 0.5);  // the clipping acted
  {
    const auto full = acc.full_parameters(net);
    const double worst = accel_test::max_relative_difference(*net, *reference);
    fmt::print("rank {}: max relative difference to one process {:.3g}, of the norms {:.3g}\n",
               acc.process_index(), worst, worst_norm);
    EXPECT(worst <= tolerance && worst_norm <= tolerance);
    const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
    for (const auto& d : digests) EXPECT(d == digests.front());
  }
  // Back to the slices once the full parameters' scope ends.
  if constexpr (!at_rest_empty)
    EXPECT(net->up1->weight.size(0) == 8 && net->down1->weight.size(1) == 8);
}

template <class Outer>
using Outer2 = accel::Accelerator<accel::Parallel<Outer, accel::TensorParallel<2>>, accel::Fp32,
                                  accel::GradAccum<2>>;

void tensor_parallel_mlp() { matches_one_process<TensorParallel2>(1e-5); }
void tensor_parallel_zero3() { matches_one_process<Outer2<accel::Zero3>>(1e-5); }
void tensor_parallel_zero2() { matches_one_process<Outer2<accel::Zero2>>(1e-5); }
void tensor_parallel_full_shard() {
  matches_one_process<Outer2<accel::Fsdp<accel::FullShard>>>(1e-5);
}
void tensor_parallel_shard_grad_op() {
  matches_one_process<Outer2<accel::Fsdp<accel::ShardGradOp>>>(1e-5);
}
void tensor_parallel_no_shard() { matches_one_process<Outer2<accel::Fsdp<accel::NoShard>>>(1e-5); }
void tensor_parallel_zero3_bf16() {
  matches_one_process<accel::Accelerator<accel::Parallel<accel::Zero3, accel::TensorParallel<2>>,
                                         accel::Bf16, accel::GradAccum<2>>>(2e-2);
}

void tensor_parallel_bf16() {
  matches_one_process<accel::Accelerator<accel::Parallel<accel::Ddp, accel::TensorParallel<2>>,
                                         accel::Bf16, accel::GradAccum<2>>>(2e-2);
}

// Sequence parallelism: the LayerNorm's gradients (each rank saw its tokens only) summed over the
// group, the row layers' biases likewise, clip_grad_norm counting each element once.
void tensor_parallel_sequence() {
  matches_one_process<TensorParallel2, TinySequence>(1e-5);
}
void tensor_parallel_sequence_zero3() {
  matches_one_process<Outer2<accel::Zero3>, TinySequence>(1e-5);
}

// A fused column layer (FusedOutputs{3}: a query, key and value of 4 rows each): each rank holds
// its 2 rows of each, returns those outputs, and the full weight gathers back in the full order.
void tensor_parallel_fused_outputs() {
  TensorParallel2 acc(accel_test::test_options());
  torch::manual_seed(4);
  accel::ColumnParallelLinear fused(torch::nn::LinearOptions(5, 12), accel::FusedOutputs{3});
  torch::manual_seed(4);
  torch::nn::Linear linear(5, 12);
  auto model = acc.prepare(fused);
  const int rank = acc.process_index();
  std::vector<torch::Tensor> rows;
  for (int part = 0; part < 3; ++part)
    rows.push_back(torch::arange(4 * part + 2 * rank, 4 * part + 2 * rank + 2));
  const torch::Tensor mine = torch::cat(rows);
  EXPECT(torch::equal(fused->weight, linear->weight.index_select(0, mine)));
  EXPECT(torch::equal(fused->bias, linear->bias.index_select(0, mine)));
  const torch::Tensor x = torch::randn({3, 5});
  EXPECT(torch::allclose(fused(x), linear(x).index_select(1, mine)));
  {
    const auto full = acc.full_parameters(fused);
    EXPECT(torch::equal(fused->weight, linear->weight) && torch::equal(fused->bias, linear->bias));
  }
  EXPECT(fused->weight.size(0) == 6);
  // A count that does not divide the features, as the layer is made; projections the degree
  // does not divide, at prepare().
  accel_test::expect_error([] { accel::ColumnParallelLinear(torch::nn::LinearOptions(5, 6),
                                                            accel::FusedOutputs{4}); },
                           "ColumnParallelLinear: FusedOutputs{4} does not divide out_features 6");
  accel::ColumnParallelLinear pairs(torch::nn::LinearOptions(5, 6), accel::FusedOutputs{2});
  accel_test::expect_error([&] { [[maybe_unused]] auto prepared = acc.prepare(pairs); },
                           "has out_features 6 as FusedOutputs{2} of 3 each, which the "
                           "tensor-parallel degree 2 does not divide; make each output a "
                           "multiple of 2");
  acc.wait_for_everyone();
}

// A sequence the group does not divide: the forward names it on every rank.
void tensor_parallel_sequence_indivisible() {
  TensorParallel2 acc(accel_test::test_options());
  TinySequence net;
  auto model = acc.prepare(net);
  accel_test::expect_error([&] { [[maybe_unused]] auto y = model(torch::randn({3, 5})); },
                           "ScatterSequence: a sequence of 3 (dimension 1 of [1, 3, 8]) does not "
                           "split across the tensor-parallel degree 2; make the sequence length "
                           "a multiple of 2");
  acc.wait_for_everyone();
}

// 3 ranks do not split into groups of 2: every rank stops as the Accelerator is made.
void tensor_parallel_world_not_divisible() {
  accel_test::expect_error(
      [] { TensorParallel2 acc(accel_test::test_options()); },
      "Parallel<Ddp,TensorParallel<2>>: the world size 3 is not a multiple of the "
      "tensor-parallel degree 2; start a multiple of 2 processes");
}

// A layer whose features the degree does not divide: prepare() names it on every rank.
void tensor_parallel_indivisible_layer() {
  TensorParallel2 acc(accel_test::test_options());
  torch::nn::Sequential net(accel::ColumnParallelLinear(4, 5), accel::RowParallelLinear(5, 4));
  accel_test::expect_error([&] { [[maybe_unused]] auto model = acc.prepare(net); },
                           "ColumnParallelLinear 'prepared model #1 "
                           "(torch::nn::SequentialImpl) 0' has out_features 5, which the "
                           "tensor-parallel degree 2 does not divide; make out_features a "
                           "multiple of 2");
  acc.wait_for_everyone();
}

// Checkpoints are refused on every rank, before anything is written.
void tensor_parallel_checkpoint_refused() {
  const fs::path folder =
      fs::temp_directory_path() / fmt::format("accel-tp-refused-{}", accel_test::this_rank());
  fs::remove_all(folder);
  TensorParallel2 acc(accel_test::test_options());
  Tiny net;
  [[maybe_unused]] auto model = acc.prepare(net);
  const std::string expected = "tensor-parallel checkpoints are not supported yet";
  accel_test::expect_error([&] { acc.save_state(folder); }, "save_state: " + expected);
  accel_test::expect_error([&] { acc.save_model(net, folder); }, "save_model: " + expected);
  accel_test::expect_error([&] { acc.load_state(folder); }, "load_state: " + expected);
  EXPECT(!fs::exists(folder));
  accel::Options periodic = accel_test::test_options();
  periodic.checkpoints.directory = folder;
  periodic.checkpoints.every_steps = 1;
  accel_test::expect_error([&] { TensorParallel2 other(periodic); },
                           "Options::checkpoints: " + expected);
  EXPECT(!fs::exists(folder));
  acc.wait_for_everyone();
}

}  // namespace

int run(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"tensor_parallel_mlp", tensor_parallel_mlp},
      {"tensor_parallel_zero3", tensor_parallel_zero3},
      {"tensor_parallel_zero2", tensor_parallel_zero2},
      {"tensor_parallel_full_shard", tensor_parallel_full_shard},
      {"tensor_parallel_shard_grad_op", tensor_parallel_shard_grad_op},
      {"tensor_parallel_no_shard", tensor_parallel_no_shard},
      {"tensor_parallel_zero3_bf16", tensor_parallel_zero3_bf16},
      {"tensor_parallel_bf16", tensor_parallel_bf16},
      {"tensor_parallel_world_not_divisible", tensor_parallel_world_not_divisible},
      {"tensor_parallel_checkpoint_refused", tensor_parallel_checkpoint_refused},
      {"tensor_parallel_indivisible_layer", tensor_parallel_indivisible_layer},
      {"tensor_parallel_sequence", tensor_parallel_sequence},
      {"tensor_parallel_sequence_zero3", tensor_parallel_sequence_zero3},
      {"tensor_parallel_fused_outputs", tensor_parallel_fused_outputs},
      {"tensor_parallel_sequence_indivisible", tensor_parallel_sequence_indivisible},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker_tensor_parallel
