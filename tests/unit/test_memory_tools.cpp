// The memory estimate (memory/memory_formulas.hpp, estimate_memory.hpp) against the padding
// rules and Accelerator::memory_use() on one process, activations measured with and without
// checkpointing; find_executable_batch_size on a CPU allocation that cannot succeed.
#include <accel/accelerator.hpp>
#include <accel/memory.hpp>
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

using accel::testing::internals;

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_memory_tools {

namespace {

struct WideBlockImpl : torch::nn::Module {
  torch::nn::Linear up{nullptr}, down{nullptr};
  explicit WideBlockImpl(std::int64_t width) {
    up = register_module("up", torch::nn::Linear(width, 4 * width));
    down = register_module("down", torch::nn::Linear(4 * width, width));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x + down(torch::dropout(torch::gelu(up(x)), 0.1, is_training()));
  }
};
TORCH_MODULE(WideBlock);

template <class Block>
torch::nn::Sequential stack(std::int64_t width, int depth) {
  torch::nn::Sequential net;
  for (int i = 0; i < depth; ++i) net->push_back(Block(width));
  return net;
}

void within(std::int64_t estimated, std::int64_t measured, double tolerance) {
  CAPTURE(estimated);
  CAPTURE(measured);
  if (measured == 0) {
    CHECK(estimated == 0);
    return;
  }
  CHECK(std::abs(static_cast<double>(estimated - measured)) <= tolerance * static_cast<double>(measured));
}

template <class Par>
void check_against_memory_use(accel::OptimizerKind kind) {
  torch::manual_seed(1);
  auto net = torch::nn::Sequential(torch::nn::Linear(7, 13), torch::nn::Tanh(), torch::nn::Linear(13, 3));
  net[0]->as<torch::nn::LinearImpl>()->bias.requires_grad_(false);  // frozen: no gradient, no state
  const auto estimate = accel::estimate_memory<Par>(net, 1, {.optimizer = kind});
  accel::Accelerator<Par> accelerator;
  torch::optim::Adam adam(net->parameters(), 1e-3);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto step = [&](auto& optimizer) {
    auto [model, prepared] = accelerator.prepare(net, optimizer);
    accelerator.backward(model(torch::randn({5, 7})).sum());
    prepared.step();
    prepared.zero_grad();
  };
  if (kind == accel::OptimizerKind::adam) step(adam); else step(sgd);
  const auto used = accelerator.memory_use();
  within(estimate.parameters, used.parameters, 0.05);
  within(estimate.gradients, used.gradients, 0.05);
  within(estimate.optimizer_state, used.optimizer_state, 0.05);
}

}  // namespace

TEST_CASE("resident memory: now, the peak, and the peak reset to now") {
  const auto before = accel::memory::resident_bytes();
  REQUIRE(before.has_value());
  CHECK(*before > 0);
  REQUIRE(accel::memory::reset_peak_resident());
  constexpr std::int64_t touched = std::int64_t{64} << 20;
  {
    torch::Tensor block = torch::ones({touched / 4});  // 64 MiB, every page written
    CHECK(*accel::memory::resident_bytes() >= *before + touched * 9 / 10);
  }
  // The peak counts the block, freed or not; a reset forgets it.
  CHECK(*accel::memory::peak_resident_bytes() >= *before + touched * 9 / 10);
  REQUIRE(accel::memory::reset_peak_resident());
  CHECK(*accel::memory::peak_resident_bytes() < *before + touched / 2);
}

TEST_CASE("estimate memory: the ZeRO formulas with accel's flat-parameter padding") {
  using accel::memory::estimate_flats;
  using accel::memory::Sharding;
  const std::vector<accel::memory::FlatGroup> flat{{10, 4, 0}};  // 10 fp32 elements
  const auto adam = accel::OptimizerKind::adam;
  // Replicated: everything whole.
  const auto ddp = estimate_flats(Sharding::replicated, flat, 0, 4, 0, adam);
  CHECK(ddp.parameters == 40);
  CHECK(ddp.gradients == 40);
  CHECK(ddp.optimizer_state == 80);
  // Zero2 at 4 ranks: padded to 12, shards of 3; the last rank holds 1 real element.
  const auto zero2_first = estimate_flats(Sharding::gradients_and_state, flat, 0, 4, 0, adam);
  CHECK(zero2_first.parameters == 48);
  CHECK(zero2_first.gradients == 12);
  CHECK(zero2_first.optimizer_state == 24);
  CHECK(zero2_first.backward_extra == 48);
  const auto zero2_last = estimate_flats(Sharding::gradients_and_state, flat, 0, 4, 3, adam);
  CHECK(zero2_last.optimizer_state == 8);
  // Zero2's flats are its buckets: backward holds the one filling and those in flight, so the
  // largest (in flight + 1) consecutive ones.
  const std::vector<accel::memory::FlatGroup> buckets{{4, 4, 0}, {40, 4, 1}, {6, 4, 2}, {2, 4, 3}, {8, 4, 4}};
  CHECK(estimate_flats(Sharding::gradients_and_state, buckets, 0, 2, 0, adam).backward_extra == 40 * 4);
  CHECK(estimate_flats(Sharding::gradients_and_state, buckets, 0, 2, 0, adam, 2).backward_extra ==
        (4 + 40 + 6) * 4);  // buckets 0, 1 and 2
  // A model known by its count: 1 MiB, then 2 MiB buckets of fp32 (262144 and 524288 elements).
  const auto counted = accel::memory::buckets_of_count(std::int64_t{1} << 20, 4, 1.0, 2.0);
  REQUIRE(counted.size() == 3);
  CHECK(counted[0].numel == 262144);
  CHECK(counted[1].numel == 524288);
  CHECK(counted[2].numel == 262144);
  CHECK(counted[2].unit == 2);
  const auto zero3 = estimate_flats(Sharding::everything, flat, 16, 4, 0, adam);
  CHECK(zero3.parameters == 12 + 16);  // the shard, and frozen parameters replicated
  CHECK(zero3.gradients == 12);
  CHECK(zero3.optimizer_state == 24);
  // One process: nothing to shard, whatever the strategy.
  CHECK(estimate_flats(Sharding::everything, flat, 0, 1, 0, adam).parameters == 40);
  CHECK(accel::memory::state_tensors_per_parameter(accel::OptimizerKind::sgd) == 0);
  CHECK(accel::optimizer_kind("sgd-momentum") == accel::OptimizerKind::sgd_momentum);
  CHECK(!accel::optimizer_kind("lamb"));
}

TEST_CASE("estimate memory: within 5% of memory_use() on one process, Ddp, Zero2 and Zero3") {
  for (const auto kind : {accel::OptimizerKind::adam, accel::OptimizerKind::sgd_momentum}) {
    CAPTURE(static_cast<int>(kind));
    check_against_memory_use<accel::Ddp>(kind);
    check_against_memory_use<accel::Zero2>(kind);
    check_against_memory_use<accel::Zero3>(kind);
  }
}

TEST_CASE("estimate memory: activations measured from a batch, and what checkpointing saves") {
  torch::manual_seed(2);
  auto plain = stack<WideBlock>(128, 4);
  auto checkpointed = stack<accel::Checkpointed<WideBlock>>(128, 4);
  const auto batch = torch::randn({64, 128});
  const auto a = accel::estimate_memory<accel::Ddp>(plain, 1, {.batch = batch});
  const auto b = accel::estimate_memory<accel::Ddp>(checkpointed, 1, {.batch = batch});
  // Each block saves at least its 64 x 512 pre-activation, GELU output and dropout mask.
  const std::int64_t per_block = 64 * 512 * 4;
  CAPTURE(a.activations);
  CAPTURE(b.activations);
  CHECK(a.activations >= 4 * 3 * per_block);
  CHECK(b.activations < a.activations / 4);  // the blocks' inputs and the output only
  CHECK(b.activations >= 4 * 64 * 128 * 4);
  CHECK(a.parameters == b.parameters);
  CHECK_THROWS_WITH_AS(accel::estimate_memory<accel::Ddp>(plain, 0), "accel: estimate_memory: world_size is 0; it must be at least 1", accel::Error);
  // Fsdp<HybridShard> on 2 nodes of 2 ranks holds what Zero3 holds on one node of 2; a node
  // size that does not divide the world is refused.
  const auto hybrid = accel::estimate_memory<accel::Fsdp<accel::HybridShard>>(
      plain, 4, {.rank = 3, .ranks_per_node = 2});
  const auto zero3 = accel::estimate_memory<accel::Zero3>(plain, 2, {.rank = 1});
  CHECK(hybrid.parameters == zero3.parameters);
  CHECK(hybrid.gradients == zero3.gradients);
  CHECK(hybrid.optimizer_state == zero3.optimizer_state);
  CHECK(hybrid.parameters < a.parameters);
  CHECK_THROWS_WITH_AS(accel::estimate_memory<accel::Fsdp<accel::HybridShard>>(
                           plain, 4, {.ranks_per_node = 3}),
                       "accel: estimate_memory: ranks_per_node is 3; it must divide world_size 4 "
                       "(0: one node)",
                       accel::Error);
}

TEST_CASE("estimate memory: tensor parallelism counts the split layers' slices, then the outer policy") {
  // Whole: a column layer of 8 x 16 + 16, a row layer of 16 x 7 + 7, a LayerNorm of 7 + 7. At
  // degree 2 a rank holds 72 of the column layer's (half its weight and bias), 56 + 7 of the
  // row layer's (half its weight, its bias whole) and the LayerNorm's 14 whole: 149.
  torch::nn::Sequential net(accel::ColumnParallelLinear(8, 16), torch::nn::Tanh(),
                            accel::RowParallelLinear(16, 7),
                            torch::nn::LayerNorm(torch::nn::LayerNormOptions({7})));
  using TpDdp = accel::Parallel<accel::Ddp, accel::TensorParallel<2>>;
  const auto ddp = accel::estimate_memory<TpDdp>(net, 4, {.rank = 3});
  CHECK(ddp.parameters == 149 * 4);
  CHECK(ddp.gradients == 149 * 4);
  CHECK(ddp.optimizer_state == 2 * 149 * 4);  // Adam's two moments
  // Zero3 across the 2 groups of 4 ranks, a unit per layer: 72 -> shards of 36, 63 -> padded to
  // 64, shards of 32 (31 real on the second), 14 -> shards of 7. Rank 3 is the second group's.
  using TpZero3 = accel::Parallel<accel::Zero3, accel::TensorParallel<2>>;
  const auto zero3_last = accel::estimate_memory<TpZero3>(net, 4, {.rank = 3});
  CHECK(zero3_last.parameters == (36 + 32 + 7) * 4);
  CHECK(zero3_last.gradients == (36 + 32 + 7) * 4);
  CHECK(zero3_last.optimizer_state == 2 * (36 + 31 + 7) * 4);
  CHECK(accel::estimate_memory<TpZero3>(net, 4, {.rank = 1}).optimizer_state ==
        2 * (36 + 32 + 7) * 4);
  // One group: nothing for Zero3 to shard.
  CHECK(accel::estimate_memory<TpZero3>(net, 2).parameters == 149 * 4);
  // The model is left whole.
  CHECK(net[0]->as<accel::ColumnParallelLinear>()->weight.sizes() == torch::IntArrayRef{16, 8});
  CHECK(net[2]->as<accel::RowParallelLinear>()->weight.sizes() == torch::IntArrayRef{7, 16});
  CHECK_THROWS_WITH_AS(accel::estimate_memory<TpDdp>(net, 3),
                       "accel: estimate_memory: world_size 3 is not a multiple of the "
                       "tensor-parallel degree 2 of Parallel<Ddp,TensorParallel<2>>; pass a "
                       "multiple of 2",
                       accel::Error);
  torch::nn::Sequential odd(accel::ColumnParallelLinear(8, 16), accel::RowParallelLinear(16, 5),
                            accel::ColumnParallelLinear(5, 3));
  CHECK_THROWS_WITH_AS(accel::estimate_memory<TpDdp>(odd, 2),
                       "accel: estimate_memory: Parallel<Ddp,TensorParallel<2>>: "
                       "ColumnParallelLinear '2' has out_features 3, which the tensor-parallel "
                       "degree 2 does not divide; make out_features a multiple of 2 (prepare() "
                       "refuses it too)",
                       accel::Error);
  // Refused after the first layers were narrowed: they are whole again.
  CHECK(odd[0]->as<accel::ColumnParallelLinear>()->weight.sizes() == torch::IntArrayRef{16, 8});
}

TEST_CASE("offload on one process: the optimizer steps CPU copies, refused where nothing is sharded") {
  torch::manual_seed(0);
  auto net = stack<WideBlock>(16, 2);
  torch::optim::Adam adam(net->parameters(), 1e-3);
  accel::Accelerator<accel::Zero3> acc({.offload = {.optimizer = true}});
  auto [model, optimizer] = acc.prepare(net, adam);
  acc.backward(model(torch::randn({4, 16})).square().mean());
  optimizer.step();
  optimizer.zero_grad();
  std::int64_t parameter_bytes = 0;
  for (const auto& p : net->parameters()) parameter_bytes += p.numel() * 4;
  const accel::MemoryUse use = acc.memory_use();
  CHECK(use.parameters == parameter_bytes);
  CHECK(use.gradients == parameter_bytes);
  CHECK(use.optimizer_state == 0);
  // The copies and their gradients, and Adam's two moments over them.
  CHECK(use.offloaded == 4 * parameter_bytes);
  const auto* shard = internals(acc).strategy().shard_optimizer(adam);
  REQUIRE(shard != nullptr);
  const auto& copies = shard->param_groups()[0].params();
  REQUIRE(copies.size() == net->parameters().size());
  for (std::size_t i = 0; i < copies.size(); ++i) {
    CHECK(copies[i].is_cpu());
    CHECK(copies[i].data_ptr() != net->parameters()[i].data_ptr());
    CHECK(torch::equal(copies[i], net->parameters()[i]));  // the step's result came back
  }
  CHECK(adam.state().empty());

  const auto refused = [](auto make, const char* needle) {
    try {
      make();
      FAIL("no error; expected one naming '" << needle << "'");
    } catch (const accel::Error& error) {
      CHECK(std::string(error.what()).find(needle) != std::string::npos);
    }
  };
  refused([] { accel::Accelerator<accel::Ddp> ddp({.offload = {.optimizer = true}}); },
          "Ddp: Options::offload moves optimizer state");
  refused([] { accel::Accelerator<accel::Zero3> zero3({.offload = {.parameters = true}}); },
          "Zero3: Options::offload.parameters keeps this rank's parameter shards on the CPU, and "
          "on one process nothing is sharded");
}

TEST_CASE("find_executable_batch_size: halves on a CPU allocation failure, other errors pass") {
  std::vector<std::int64_t> tried;
  // More than 1 TiB per sample above 4: no machine this runs on has it, so the allocator fails.
  const auto used = accel::find_executable_batch_size(32, [&](std::int64_t size) {
    tried.push_back(size);
    const std::int64_t per_sample = size > 4 ? (std::int64_t{1} << 38) : 16;
    auto activations = torch::empty({size, per_sample});
    return activations.size(0);
  });
  CHECK(used == 4);
  CHECK(tried == std::vector<std::int64_t>{32, 16, 8, 4});

  int calls = 0;
  CHECK_THROWS_WITH_AS(accel::find_executable_batch_size(8, [&](std::int64_t) {
    ++calls;
    throw std::runtime_error("not a memory error");
  }),
                       "not a memory error", std::runtime_error);
  CHECK(calls == 1);

  CHECK_THROWS_WITH_AS(accel::find_executable_batch_size(2, [](std::int64_t size) {
    (void)torch::empty({size, std::int64_t{1} << 40});
  }),
                       doctest::Contains("accel: find_executable_batch_size: batch size 1 still runs out of memory"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(accel::find_executable_batch_size(0, [](std::int64_t) {}),
                       doctest::Contains("the starting batch size is 0"), accel::Error);
}

}  // namespace unit_memory_tools
