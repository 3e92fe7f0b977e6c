// Memory tools across processes: activation checkpointing under Ddp and Zero3 trains bitwise as
// without it (the recompute sees the unit's gathered parameters, each gradient arrives once);
// estimate_memory against memory_use() on every rank; find_executable_batch_size agreeing on
// the smallest size any rank can run.
#include "scenario.hpp"

#include <accel/memory.hpp>

#include <cstdint>
#include <vector>

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_memory {

namespace {

using accel_test::test_options;

struct Sample {
  torch::Tensor x, y;
};
struct Regression {
  torch::Tensor inputs, targets;
  Regression() {
    torch::manual_seed(1234);
    inputs = torch::randn({48, 8});
    targets = inputs.matmul(torch::linspace(-1, 1, 8)).unsqueeze(1) + 0.1 * torch::randn({48, 1});
  }
  std::int64_t size() const { return inputs.size(0); }
  Sample get(std::int64_t i) const { return {inputs[i], targets[i]}; }
};

struct BlockImpl : torch::nn::Module {
  torch::nn::Linear up{nullptr}, down{nullptr};
  BlockImpl() {
    up = register_module("up", torch::nn::Linear(16, 37));  // odd sizes: the shards get padding
    down = register_module("down", torch::nn::Linear(37, 16));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x + down(torch::dropout(torch::gelu(up(x)), 0.25, is_training()));
  }
};
TORCH_MODULE(Block);

torch::nn::Sequential model() {
  return torch::nn::Sequential(torch::nn::Linear(8, 16), Block(), Block(), Block(),
                               torch::nn::Linear(16, 1));
}

// The same layers with the blocks in a ModuleList, each an accel::Sharded unit.
struct ListModelImpl : torch::nn::Module {
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  std::vector<accel::Sharded<Block>> block;
  ListModelImpl()
      : in(register_module("in", torch::nn::Linear(8, 16))),
        out(register_module("out", torch::nn::Linear(16, 1))),
        blocks(register_module("blocks", torch::nn::ModuleList())) {
    for (int i = 0; i < 3; ++i) {
      block.push_back(accel::Sharded<Block>());
      blocks->push_back(block.back());
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = in(x);
    for (auto& b : block) h = b(h);
    return out(h);
  }
};
TORCH_MODULE(ListModel);
ListModel list_model() { return ListModel(); }

// One Accelerator trains two copies of the same model (rank 0's weights) on the same batches and
// dropout draws, one with every Sequential child checkpointed (the function
// Options::activation_checkpointing calls); their parameters must stay bitwise equal.
template <class Par>
void checkpointing_bitwise() {
  accel::Accelerator<Par> acc(test_options());
  torch::manual_seed(static_cast<std::uint64_t>(1 + acc.process_index()));
  auto plain = model();
  auto checkpointed = model();
  {
    torch::NoGradGuard no_grad;
    const auto from = plain->parameters();
    auto to = checkpointed->parameters();
    for (std::size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  const auto wrapped = accel::memory::checkpoint_sequential_children(checkpointed.ptr());
  EXPECT(wrapped == 5);
  torch::optim::Adam adam_plain(plain->parameters(), 0.01);
  torch::optim::Adam adam_checkpointed(checkpointed->parameters(), 0.01);
  accel::DataLoader loader(Regression(), {.batch_size = 4, .shuffle = true, .seed = 5});
  auto [a, optimizer_a, b, optimizer_b, batches] =
      acc.prepare(plain, adam_plain, checkpointed, adam_checkpointed, loader);
  std::uint64_t step = 0;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : batches) {
      const std::uint64_t seed = 1000 * ++step + static_cast<std::uint64_t>(acc.process_index());
      torch::manual_seed(seed);
      acc.backward(torch::mse_loss(a(batch.x), batch.y));
      torch::manual_seed(seed);
      const auto out = b(batch.x);
      EXPECT(out.grad_fn() && out.grad_fn()->name().find("CheckpointFunction") != std::string::npos);
      acc.backward(torch::mse_loss(out, batch.y));
      optimizer_a.step();
      optimizer_b.step();
      optimizer_a.zero_grad();
      optimizer_b.zero_grad();
    }
  const auto full_a = acc.full_parameters(plain);
  const auto full_b = acc.full_parameters(checkpointed);
  const auto da = accel::state::parameter_digest(*plain);
  const auto db = accel::state::parameter_digest(*checkpointed);
  fmt::print("rank {}: {} digests plain {:016x} checkpointed {:016x}, {} steps\n", acc.process_index(),
             Par::name, da, db, step);
  EXPECT(step > 0);
  EXPECT(da == db);
  const auto digests = acc.gather_object(da);
  for (const auto d : digests) EXPECT(d == digests.front());
}

// estimate_memory<Par>(model, W, {adam, rank}) before prepare, against memory_use() after two
// steps: parameters, gradients and optimizer state each within 5% on every rank.
template <class Par, auto make_model = model>
void estimate_matches() {
  accel::Accelerator<Par> acc(test_options());
  torch::manual_seed(3);
  auto net = make_model();
  const auto estimate = accel::estimate_memory<Par>(
      net, acc.num_processes(), {.optimizer = accel::OptimizerKind::adam, .rank = acc.process_index()});
  torch::optim::Adam adam(net->parameters(), 0.01);
  accel::DataLoader loader(Regression(), {.batch_size = 4, .shuffle = true, .seed = 5});
  auto [m, optimizer, batches] = acc.prepare(net, adam, loader);
  int steps = 0;
  for (const auto& batch : batches) {
    acc.backward(torch::mse_loss(m(batch.x), batch.y));
    optimizer.step();
    optimizer.zero_grad();
    if (++steps == 2) break;
  }
  const auto used = acc.memory_use();
  fmt::print("rank {}: {} estimate {} {} {} measured {} {} {}\n", acc.process_index(), Par::name,
             estimate.parameters, estimate.gradients, estimate.optimizer_state, used.parameters,
             used.gradients, used.optimizer_state);
  auto close = [](std::int64_t e, std::int64_t u) {
    return std::abs(static_cast<double>(e - u)) <= 0.05 * static_cast<double>(u);
  };
  EXPECT(close(estimate.parameters, used.parameters));
  EXPECT(close(estimate.gradients, used.gradients));
  EXPECT(close(estimate.optimizer_state, used.optimizer_state));
}

// Rank 0 fits 16 samples, rank 1 only 4: both run 4.
void executable_batch_size_agrees() {
  accel::Accelerator<accel::Ddp> acc(test_options());
  const std::int64_t fits = acc.process_index() == 0 ? 16 : 4;
  std::vector<std::int64_t> tried;
  const auto used = accel::find_executable_batch_size(
      64,
      [&](std::int64_t size) {
        tried.push_back(size);
        auto t = torch::empty({size, size > fits ? (std::int64_t{1} << 38) : 8});
        return t.size(0);
      },
      acc);
  EXPECT(used == 4);
  EXPECT((tried == std::vector<std::int64_t>{64, 32, 16, 8, 4}));
}

}  // namespace

int run(int argc, char** argv) {
  return accel_test::run_scenario(
      argc, argv,
      {{"checkpointing_ddp", checkpointing_bitwise<accel::Ddp>},
       {"checkpointing_zero3", checkpointing_bitwise<accel::Zero3>},
       {"checkpointing_fsdp_full_shard", checkpointing_bitwise<accel::Fsdp<accel::FullShard>>},
       {"estimate_memory_ddp", estimate_matches<accel::Ddp>},
       {"estimate_memory_zero2", estimate_matches<accel::Zero2>},
       {"estimate_memory_zero3", estimate_matches<accel::Zero3>},
       {"estimate_memory_zero3_sharded_blocks", estimate_matches<accel::Zero3, list_model>},
       {"executable_batch_size_agrees", executable_batch_size_agrees}});
}

}  // namespace dist_worker_memory
