// Tensor parallelism (Parallel<P, TensorParallel<2>>, docs/how-to/tensor-parallel.md) against
// one process on the global batch: two column -> activation -> row pairs, a frozen Linear, a
// LayerNorm and a plain head, trained with AdamW, GradAccum<2> and clip_grad_norm, the full
// weights written through full_parameters() halfway; on 2 ranks (one tensor-parallel group) and
// on 4 (two groups, the outer policy across them): Ddp, and the sharded outer policies (Zero2,
// Zero3 and the Fsdp names), whose flat parameters are made of the slices; under Bf16 (Ddp, and
// Zero3 on 4) within bf16's tolerance. With sequence parallelism (the same model with its
// LayerNorm and residual stream split by sequence) on 2 and 4 ranks under Ddp and Zero3. A fused
// column layer's split (FusedOutputs). The refusals: a world size the degree does not divide, a
// layer it does not divide, a sequence it does not divide.
// Checkpoints across meshes (docs/concepts/checkpoints.md):
//   tensor_parallel_resume_<outer>  4 ranks (dp 2 x tp 2): 4 steps straight against 2, save,
//                                   2 more, load, 2 more: parameters and optimizer state bitwise
//   tensor_parallel_checkpoint_unknown_optimizer  an optimizer saved only as one rank's archive
//                                   refused
//   tp_save_<outer>, tp_reload_<to> phases in new processes (checkpoint.sh tensor_parallel): a
//                                   checkpoint and save_model's weights written on one mesh,
//                                   loaded on another ($ACCEL_TEST_FROM), saved again at once
//                                   ($ACCEL_TEST_TO): the same tensors, bitwise, and the same
//                                   weights files byte for byte; tp_auto_save and
//                                   tp_auto_resume: periodic saves, and a resume refused where
//                                   the data-parallel degree, so the global batch, changes
#include <accel/checkpoints.hpp>
#include <accel/tools/checkpoint_tool.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "alone_in_the_job.hpp"
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
  // A checkpoint places each rank's share of every projection in the full tensor: its rank
  // files assemble the one-process layer's weight and bias, as save_model's weights file holds.
  const char* port = std::getenv("MASTER_PORT");
  const fs::path folder =
      fs::temp_directory_path() / fmt::format("accel-tp-fused-{}", port ? port : "local");
  if (acc.is_main_process()) fs::remove_all(folder);
  acc.wait_for_everyone();
  acc.save_state(folder / "state");
  acc.save_model(fused, folder / "model");
  if (acc.is_main_process()) {
    accel::state::SliceCatalog catalog;
    for (const auto& entry : fs::directory_iterator(folder / "state"))
      if (entry.path().extension() == ".safetensors")
        catalog.add(accel::state::safetensors::File::read(entry.path()), entry.path().string());
    EXPECT(torch::equal(catalog.read("model0/weight", 0, 60, torch::kFloat),
                        linear->weight.reshape({-1})));
    EXPECT(torch::equal(catalog.read("model0/bias", 0, 12, torch::kFloat), linear->bias));
    const auto weights =
        accel::state::safetensors::File::read(folder / "model" / "model.safetensors");
    EXPECT(torch::equal(weights.tensor("weight"), linear->weight));
    EXPECT(torch::equal(weights.tensor("bias"), linear->bias));
    fs::remove_all(folder);
  }
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

// Fp8 (precision/fp8.hpp) on the split layers: a column layer of 16 x 32 and a row layer of
// 32 x 16 compute in fp8, the rest in bf16. The column layer's second 16 rows are 8 times the
// first's, so that the first rank's slice alone has an amax 8 times below the whole weight's:
// each rank must use one process's scales for every fp8 tensor (the amaxes agreed over the
// tensor-parallel group as well as the data-parallel one), and the trained model must be one
// process's within Fp8's tolerance (2e-2, as dist.precision_matrix: plain SGD, which does not
// carry fp8's roundings into chaos as Adam would).
struct TinyFp8Impl : torch::nn::Module {
  TinyFp8Impl()
      : embed(register_module("embed", torch::nn::Linear(5, 16))),
        up(register_module("up", accel::ColumnParallelLinear(16, 32))),
        down(register_module("down", accel::RowParallelLinear(32, 16))),
        head(register_module("head", torch::nn::Linear(16, 1))) {
    torch::NoGradGuard no_grad;
    up->weight.narrow(0, 16, 16).mul_(8);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = torch::tanh(embed(x));
    return head(h + down(torch::tanh(up(h))));
  }
  torch::nn::Linear embed;
  accel::ColumnParallelLinear up;
  accel::RowParallelLinear down;
  torch::nn::Linear head;
};
TORCH_MODULE(TinyFp8);

// Trains a TinyFp8 on batches of `batch_size` (12 windows of 2 whatever the number of groups).
template <class Accel>
TinyFp8 train_fp8(Accel& acc, std::int64_t batch_size) {
  torch::manual_seed(static_cast<std::uint64_t>(1 + acc.process_index()));  // prepare: rank 0's
  TinyFp8 net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  accel::DataLoader loader(accel_test::Regression(),
                           {.batch_size = batch_size, .shuffle = true, .seed = 5});
  auto [model, optimizer, batches] = acc.prepare(net, sgd, loader);
  for (const auto& batch : batches) {
    acc.backward(torch::mse_loss(model(batch.x), batch.y));
    if (acc.sync_gradients()) acc.clip_grad_norm(0.5);
    optimizer.step();
    optimizer.zero_grad();
  }
  return net;
}

// The fp8 layers' names and their tensors' scales (input, weight, output gradient of each).
template <class Accel>
std::pair<std::vector<std::string>, std::vector<float>> fp8_scales(const Accel& acc) {
  const auto& fp8 = accel::testing::internals(acc).precision();
  std::vector<float> scales;
  for (std::size_t k = 0; k < fp8.fp8_layers().size(); ++k)
    for (const auto* t : {&fp8.scaling(k).input, &fp8.scaling(k).weight,
                          &fp8.scaling(k).grad_output})
      scales.push_back(t->scale());
  return {fp8.fp8_layers(), scales};
}

template <class Outer>
void fp8_matches_one_process() {
  using Accel = accel::Accelerator<accel::Parallel<Outer, accel::TensorParallel<2>>, accel::Fp8,
                                   accel::GradAccum<2>>;
  using One = accel::Accelerator<accel::Ddp, accel::Fp8, accel::GradAccum<2>>;
  Accel acc(accel_test::test_options());
  const int groups = acc.num_processes() / 2;
  TinyFp8 net = train_fp8(acc, 4 / groups);
  const auto [layers, scales] = fp8_scales(acc);
  std::pair<std::vector<std::string>, std::vector<float>> theirs;
  TinyFp8 reference = [&] {
    accel_test::AloneInTheJob alone;
    One one(accel_test::test_options());
    TinyFp8 trained = train_fp8(one, 4);
    theirs = fp8_scales(one);
    return trained;
  }();
  EXPECT(layers == std::vector<std::string>({"up", "down"}) && layers == theirs.first);
  EXPECT(scales.size() == 6 && theirs.second.size() == 6);
  // The output gradient's amax is `groups` times one process's: each data-parallel rank's loss
  // is the mean over its own part of the batch (the ranks average the gradients after), so its
  // scale is 1/groups of one process's, as under any data-parallel policy; a power of two here,
  // by which e5m2 rounds every value alike.
  double worst_scale = 0;
  for (std::size_t i = 0; i < std::min(scales.size(), theirs.second.size()); ++i) {
    const double mine = static_cast<double>(scales[i]) * (i % 3 == 2 ? groups : 1);
    worst_scale = std::max(worst_scale, std::abs(mine - theirs.second[i]) / theirs.second[i]);
  }
  const auto full = acc.full_parameters(net);
  const double worst = accel_test::max_relative_difference(*net, *reference);
  fmt::print("rank {}: max relative difference to one process {:.3g}, of the fp8 scales {:.3g}\n",
             acc.process_index(), worst, worst_scale);
  EXPECT(worst_scale <= 2e-2 && worst <= 2e-2);
  const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
  for (const auto& d : digests) EXPECT(d == digests.front());
}

void tensor_parallel_fp8() { fp8_matches_one_process<accel::Ddp>(); }
void tensor_parallel_zero3_fp8() { fp8_matches_one_process<accel::Zero3>(); }

// gather_for_metrics: the ranks of a tensor-parallel group share their batch, and what they
// gather is each data-parallel rank's values once, in data-parallel order, the wrapped duplicates
// of the last round dropped: the one-process batches, as inputs and as predictions. 10 samples
// in batches of 2 per group: on 4 ranks (2 groups) 5 global batches in 3 rounds, the last
// completed by batch 0 again.
struct TenSamples {
  accel_test::Regression all;
  std::int64_t size() const { return 10; }
  accel_test::Sample get(std::int64_t i) const { return all.get(i); }
};

void tensor_parallel_gather_for_metrics() {
  TensorParallel2 acc(accel_test::test_options());
  const int groups = acc.num_processes() / 2;
  torch::manual_seed(1);
  Tiny net;
  accel::DataLoader loader(TenSamples(), {.batch_size = 2, .shuffle = true, .seed = 5});
  auto [model, batches] = acc.prepare(net, loader);
  std::vector<torch::Tensor> inputs, predictions;
  {
    torch::NoGradGuard no_grad;
    for (const auto& batch : batches) {
      inputs.push_back(acc.gather_for_metrics(batch.x));
      predictions.push_back(acc.gather_for_metrics(model(batch.x)));
    }
  }
  torch::manual_seed(1);
  Tiny reference;
  accel::DataLoader global(TenSamples(), {.batch_size = 2 * groups, .shuffle = true, .seed = 5});
  std::size_t k = 0;
  torch::NoGradGuard no_grad;
  for (const auto& batch : global) {
    EXPECT(k < inputs.size());
    if (k >= inputs.size()) break;
    fmt::print("rank {}: round {}: {} rows gathered, {} in the one-process batch\n",
               acc.process_index(), k, inputs[k].size(0), batch.x.size(0));
    EXPECT(torch::equal(inputs[k], batch.x));
    EXPECT(predictions[k].sizes() == reference(batch.x).sizes() &&
           torch::allclose(predictions[k], reference(batch.x), 1e-5, 1e-6));
    ++k;
  }
  EXPECT(k == inputs.size());
}

// --- Checkpoints across meshes -----------------------------------------------------------------

template <class Outer, int N = 2>
using MeshAccelerator = accel::Accelerator<accel::Parallel<Outer, accel::TensorParallel<N>>>;

// The same initial weights in every phase.
Tiny fresh_tiny() {
  torch::manual_seed(7);
  return Tiny();
}

torch::optim::AdamW tiny_adamw(Tiny& net) {
  return torch::optim::AdamW(net->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.01));
}

// Steps [first, last), each data-parallel rank on a batch of its own, which the ranks of its
// tensor-parallel group share.
template <class Accel, class Model, class Optimizer>
void train_steps(Accel& acc, Model& model, Optimizer& optimizer, int first, int last) {
  const int data_rank = acc.process_index() / std::max(1, accel::tensor_parallel_degree_v<
                                                             typename Accel::parallelism_policy>);
  for (int step = first; step < last; ++step) {
    torch::manual_seed(static_cast<std::uint64_t>(100 + 10 * step + data_rank));
    const torch::Tensor x = torch::randn({4, 5}), y = torch::randn({4, 1});
    acc.backward(torch::mse_loss(model(x), y));
    optimizer.step();
    optimizer.zero_grad();
  }
}

// Both checkpoints hold the same model tensors and optimizer state, bitwise (the full tensors,
// whatever mesh wrote them), optimizer state included.
void expect_same_state(const fs::path& a, const fs::path& b) {
  const auto rows = accel::state::diff_checkpoints(a, b);
  bool moments = false;
  for (const auto& row : rows) {
    if (row.status != "equal")
      fmt::print("{} vs {}: '{}' {}\n", a.string(), b.string(), row.name, row.status);
    EXPECT(row.status == "equal");
    moments = moments || row.name.find("exp_avg_sq") != std::string::npos;
  }
  EXPECT(rows.size() > 20 && moments);
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Resume at the same mesh (dp 2 x tp 2 on 4 ranks): two steps, save, two more; load, the same
// two again: bitwise the same parameters and optimizer state. The load is checked too: right
// after it the parameters are those saved.
template <class Outer>
void resume_same_mesh() {
  const char* port = std::getenv("MASTER_PORT");
  const fs::path folder = fs::temp_directory_path() /
                          fmt::format("accel-tp-resume-{}-{}", port ? port : "local",
                                      Outer::name);
  MeshAccelerator<Outer> acc(accel_test::test_options());
  if (acc.is_main_process()) fs::remove_all(folder);
  acc.wait_for_everyone();
  Tiny net = fresh_tiny();
  auto adamw = tiny_adamw(net);
  auto [model, optimizer] = acc.prepare(net, adamw);
  const auto digest = [&] {
    const auto full = acc.full_parameters(net);
    return accel::state::parameter_digest(*net);
  };
  train_steps(acc, model, optimizer, 0, 2);
  acc.save_state(folder / "at2");
  const auto saved = digest();
  train_steps(acc, model, optimizer, 2, 4);
  acc.save_state(folder / "straight");
  acc.load_state(folder / "at2");
  EXPECT(digest() == saved);
  train_steps(acc, model, optimizer, 2, 4);
  acc.save_state(folder / "resumed");
  if (acc.is_main_process()) {
    expect_same_state(folder / "straight", folder / "resumed");
    EXPECT(accel::state::verify_checkpoint(folder / "at2").empty());
    const auto manifest = accel::state::Manifest::read(folder / "at2", "test");
    EXPECT(manifest.tensor_parallel == 2 && manifest.world_size == acc.num_processes());
    for (const auto& p : manifest.models.at(0).parameters) {
      const int expected = p.name.rfind("up", 0) == 0     ? 0
                           : p.name == "down1.weight" ||
                                     p.name == "down2.weight" ? 1
                                                              : -1;
      EXPECT(p.tensor_parallel_dim == expected);
    }
  }
  acc.wait_for_everyone();
  if (acc.is_main_process()) fs::remove_all(folder);
}

void tensor_parallel_resume_ddp() { resume_same_mesh<accel::Ddp>(); }
void tensor_parallel_resume_zero3() { resume_same_mesh<accel::Zero3>(); }

// An optimizer accel saves only as rank 0's libtorch archive cannot hold a tensor-parallel
// group's slices: save_state refuses it on every rank, and writes nothing.
void tensor_parallel_checkpoint_unknown_optimizer() {
  const char* port = std::getenv("MASTER_PORT");
  const fs::path folder =
      fs::temp_directory_path() / fmt::format("accel-tp-lbfgs-{}", port ? port : "local");
  TensorParallel2 acc(accel_test::test_options());
  Tiny net = fresh_tiny();
  torch::optim::LBFGS lbfgs(net->parameters());
  [[maybe_unused]] auto prepared = acc.prepare(net, lbfgs);
  accel_test::expect_error([&] { acc.save_state(folder); },
                           "save_state: optimizer #0 is of a type accel does not save field by "
                           "field, only as one rank's libtorch archive, and under "
                           "Parallel<Ddp,TensorParallel<2>> the ranks of a tensor-parallel group "
                           "(2 of them) hold different slices");
  acc.wait_for_everyone();
  EXPECT(!fs::exists(folder));
}

// The phases of checkpoint.sh tensor_parallel, in $ACCEL_TEST_DIR.
fs::path shared_folder() {
  const char* folder = std::getenv("ACCEL_TEST_DIR");
  if (folder == nullptr) throw std::runtime_error("ACCEL_TEST_DIR is not set");
  return folder;
}
std::string environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw std::runtime_error(fmt::format("{} is not set", name));
  return value;
}

// Two steps from the loader (two batches per data-parallel rank), then $ACCEL_TEST_TO and its
// weights, "<to>_model".
template <class Accel>
void save_phase() {
  const fs::path dir = shared_folder(), to = dir / environment("ACCEL_TEST_TO");
  Accel acc(accel_test::test_options());
  Tiny net = fresh_tiny();
  auto adamw = tiny_adamw(net);
  accel::DataLoader loader(accel_test::Regression(), {.batch_size = 4, .shuffle = true, .seed = 5});
  auto [model, optimizer, batches] = acc.prepare(net, adamw, loader);
  int served = 0;
  for (const auto& batch : batches) {
    acc.backward(torch::mse_loss(model(batch.x), batch.y));
    optimizer.step();
    optimizer.zero_grad();
    if (++served == 2) break;
  }
  acc.save_state(to);
  acc.save_model(net, fs::path(to.string() + "_model"));
  if (acc.is_main_process()) {
    // Two batches on each data-parallel rank: the ranks of a tensor-parallel group shared theirs.
    const auto manifest = accel::state::Manifest::read(to, "test");
    const int degree = std::max(1, accel::tensor_parallel_degree_v<typename Accel::parallelism_policy>);
    EXPECT(manifest.loaders.at(0).global_batches_consumed == 2 * acc.num_processes() / degree);
    EXPECT(manifest.tensor_parallel == degree);
  }
}

// On this mesh: load_model of $ACCEL_TEST_FROM's weights, a step away from them, then
// load_state of $ACCEL_TEST_FROM: the parameters load_model gave; saved again at once as
// $ACCEL_TEST_TO: the same tensors, the same place in the data, and save_model's files byte for
// byte.
template <class Accel>
void reload_phase() {
  const fs::path dir = shared_folder();
  const fs::path from = dir / environment("ACCEL_TEST_FROM"), to = dir / environment("ACCEL_TEST_TO");
  const fs::path from_model = from.string() + "_model", to_model = to.string() + "_model";
  Accel acc(accel_test::test_options());
  Tiny net = fresh_tiny();
  auto adamw = tiny_adamw(net);
  accel::DataLoader loader(accel_test::Regression(), {.batch_size = 4, .shuffle = true, .seed = 5});
  auto [model, optimizer, batches] = acc.prepare(net, adamw, loader);
  const auto digest = [&] {
    const auto full = acc.full_parameters(net);
    return accel::state::parameter_digest(*net);
  };
  acc.load_model(net, from_model);
  const std::uint64_t read = digest();
  train_steps(acc, model, optimizer, 0, 1);
  EXPECT(digest() != read);
  acc.load_state(from);
  const std::uint64_t loaded = digest();
  acc.save_state(to);
  acc.save_model(net, to_model);
  EXPECT(loaded == read);
  if (acc.is_main_process()) {
    expect_same_state(from, to);
    EXPECT(accel::state::verify_checkpoint(to).empty());
    const auto saved = accel::state::Manifest::read(from, "test");
    const auto again = accel::state::Manifest::read(to, "test");
    EXPECT(saved.loaders.at(0).global_batches_consumed ==
           again.loaders.at(0).global_batches_consumed);
    std::size_t files = 0;
    for (const auto& entry : fs::directory_iterator(from_model)) {
      ++files;
      EXPECT(file_bytes(entry.path()) == file_bytes(to_model / entry.path().filename()));
    }
    EXPECT(files > 0);
  }
  acc.wait_for_everyone();
}

// Periodic saves on (dp 2, tp 2): a step, saved as checkpoint_0 of $ACCEL_TEST_DIR/auto as the
// next batch is served.
accel::Options periodic(bool resume) {
  accel::Options options = accel_test::test_options();
  options.checkpoints = {.directory = shared_folder() / "auto", .every_steps = 1, .resume = resume};
  return options;
}
void tp_auto_save() {
  MeshAccelerator<accel::Ddp> acc(periodic(false));
  Tiny net = fresh_tiny();
  auto adamw = tiny_adamw(net);
  accel::DataLoader loader(accel_test::Regression(), {.batch_size = 4, .shuffle = true, .seed = 5});
  auto [model, optimizer, batches] = acc.prepare(net, adamw, loader);
  int served = 0;
  for (const auto& batch : batches) {
    if (++served == 2) break;  // the save comes as the second batch is served
    acc.backward(torch::mse_loss(model(batch.x), batch.y));
    optimizer.step();
    optimizer.zero_grad();
  }
  acc.wait_for_everyone();
  EXPECT(fs::exists(shared_folder() / "auto" / "checkpoint_0" / "manifest.json"));
}

// Its resume: refused on (dp 4, tp 1), where each step would take 4 loader batches instead of 2;
// taken on (dp 2, tp 2).
void tp_auto_resume() {
  const auto prepare_all = [](auto& acc) {
    Tiny net = fresh_tiny();
    auto adamw = tiny_adamw(net);
    accel::DataLoader loader(accel_test::Regression(),
                             {.batch_size = 4, .shuffle = true, .seed = 5});
    [[maybe_unused]] auto prepared = acc.prepare(net, adamw, loader);
  };
  {
    MeshAccelerator<accel::Zero2, 1> acc(periodic(true));
    accel_test::expect_error([&] { prepare_all(acc); },
                             "was saved by 4 processes (2 data-parallel x tensor-parallel 2) with "
                             "GradAccum<1> (2 loader batches per optimizer step); this run has 4 "
                             "processes with GradAccum<1> (4 loader batches per optimizer step), "
                             "so its global batch would change");
  }
  MeshAccelerator<accel::Ddp> acc(periodic(true));
  prepare_all(acc);
  EXPECT(acc.resumed_from().has_value());
}

void tp_save_zero3() { save_phase<MeshAccelerator<accel::Zero3>>(); }
void tp_save_ddp() { save_phase<accel::Accelerator<accel::Ddp>>(); }
void tp_reload_ddp_tp2() { reload_phase<MeshAccelerator<accel::Ddp>>(); }
void tp_reload_zero3_tp2() { reload_phase<MeshAccelerator<accel::Zero3>>(); }
void tp_reload_zero2_tp1() { reload_phase<MeshAccelerator<accel::Zero2, 1>>(); }
void tp_reload_ddp() { reload_phase<accel::Accelerator<accel::Ddp>>(); }

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
      {"tensor_parallel_resume_ddp", tensor_parallel_resume_ddp},
      {"tensor_parallel_resume_zero3", tensor_parallel_resume_zero3},
      {"tensor_parallel_checkpoint_unknown_optimizer",
       tensor_parallel_checkpoint_unknown_optimizer},
      {"tp_save_zero3", tp_save_zero3},
      {"tp_auto_save", tp_auto_save},
      {"tp_auto_resume", tp_auto_resume},
      {"tp_save_ddp", tp_save_ddp},
      {"tp_reload_ddp_tp2", tp_reload_ddp_tp2},
      {"tp_reload_zero3_tp2", tp_reload_zero3_tp2},
      {"tp_reload_zero2_tp1", tp_reload_zero2_tp1},
      {"tp_reload_ddp", tp_reload_ddp},
      {"tensor_parallel_indivisible_layer", tensor_parallel_indivisible_layer},
      {"tensor_parallel_sequence", tensor_parallel_sequence},
      {"tensor_parallel_sequence_zero3", tensor_parallel_sequence_zero3},
      {"tensor_parallel_fused_outputs", tensor_parallel_fused_outputs},
      {"tensor_parallel_sequence_indivisible", tensor_parallel_sequence_indivisible},
      {"tensor_parallel_gather_for_metrics", tensor_parallel_gather_for_metrics},
      {"tensor_parallel_fp8", tensor_parallel_fp8},
      {"tensor_parallel_zero3_fp8", tensor_parallel_zero3_fp8},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker_tensor_parallel
