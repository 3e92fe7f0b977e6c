// Precision across processes: every precision policy with every parallelism policy that runs on
// several processes matches its one-process run on the global batch, and Fp16's loss scaler
// takes the same decision on every rank when only one rank's gradients (or one rank's shard of
// them) overflow.
#include "scenario.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../loss_scaled_fp32.hpp"
#include "alone_in_the_job.hpp"

using accel::testing::internals;

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_precision {

namespace {

using accel_test::AloneInTheJob;
using accel_test::max_relative_difference;
using accel_test::test_options;

// Every parallelism policy: each runs across processes.
using MultiProcess =
    std::tuple<accel::Ddp, accel::Zero2, accel::Zero3, accel::Fsdp<accel::ShardGradOp>,
               accel::Fsdp<accel::FullShard>, accel::Fsdp<accel::NoShard>,
               accel::Fsdp<accel::HybridShard>>;

// Every precision accel defines, and fp32 with Fp16's scaler (which runs where Fp16 cannot).
using Precisions = decltype(std::tuple_cat(std::declval<accel::precision::AllPolicies>(),
                                           std::declval<std::tuple<accel_test::LossScaledFp32>>()));

struct Sample {
  torch::Tensor x, y;
};
// 48 samples: whole global batches of 4 per rank on 1, 2 and 3 ranks.
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

torch::nn::Sequential model() {
  return torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::Tanh(), torch::nn::Linear(32, 16),
                               torch::nn::Tanh(), torch::nn::Linear(16, 1));
}

// The same shape with its middle as two accel::Sharded blocks (Zero3 units of their own) whose
// forward takes a second, non-tensor argument.
struct ScaledBlockImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  ScaledBlockImpl() : fc(register_module("fc", torch::nn::Linear(16, 16))) {}
  torch::Tensor forward(const torch::Tensor& x, double scale) {
    return x + scale * torch::tanh(fc(x));
  }
};
TORCH_MODULE(ScaledBlock);
struct BlocksModelImpl : torch::nn::Module {
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  std::vector<accel::Sharded<ScaledBlock>> block;
  BlocksModelImpl()
      : in(register_module("in", torch::nn::Linear(8, 16))),
        out(register_module("out", torch::nn::Linear(16, 1))),
        blocks(register_module("blocks", torch::nn::ModuleList())) {
    for (int i = 0; i < 2; ++i) {
      block.push_back(accel::Sharded<ScaledBlock>());
      blocks->push_back(block.back());
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = in(x);
    for (auto& b : block) h = b(h, 0.5);
    return out(h);
  }
};
TORCH_MODULE(BlocksModel);
BlocksModel blocks_model() { return BlocksModel(); }

// Trains a fresh model (rank 0's seed; other ranks start elsewhere and get rank 0's weights at
// prepare) for two epochs with Adam, batches of `per_rank` on each rank, and returns it.
template <class Accel, auto make_model = model>
auto train(Accel& accelerator, std::int64_t per_rank) {
  torch::manual_seed(static_cast<std::uint64_t>(1 + accelerator.process_index()));
  auto net = make_model();
  torch::optim::SGD sgd(net->parameters(), 0.05);
  accel::DataLoader loader(Regression(), {.batch_size = per_rank, .shuffle = true, .seed = 5});
  auto [prepared, optimizer, batches] = accelerator.prepare(net, sgd, loader);
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : batches) {
      accelerator.backward(torch::mse_loss(prepared(batch.x), batch.y));
      optimizer.step();
      // Both runs must take the same steps: see matrix_options().
      EXPECT(!accelerator.optimizer_step_was_skipped());
      optimizer.zero_grad();
    }
  return net;
}

// Tolerance of each precision against its one-process run, as max |difference| / max |weight|
// per parameter after two epochs of SGD (12 steps, or 6 windows of two). Fp32 (and fp32 with loss scaling, every scale a power of
// two): only the order of additions differs (a mean of per-rank means against one mean); 3e-7
// measured, 1e-5 allowed, as in the strategies' own tests. Bf16 and Fp16 round every matmul's
// output to 8 and 11 significant bits, and on two ranks each rank's partial weight gradient is
// rounded before the ranks average it, where one process rounds the whole sum once: bf16
// measured 5.2e-3 (one process against fp32: 3.4e-3), 2e-2 allowed; fp16 measured on libtorch
// 2.6 (docs/how-to/precision.md#tested-across-processes), 5e-3 allowed. Fp8 (its 32 x 16 layer in fp8,
// the rest bf16): the amaxes agreed across ranks give one process's scales, and the rest is
// bf16's rounding: measured 5.5e-3, 2e-2 allowed. Momentum or Adam would carry
// such roundings into chaos within a few steps, which is why plain SGD here.
template <class Prec>
double tolerance() {
  if constexpr (Prec::compute == accel::policy::ComputeType::bfloat16 ||
                Prec::compute == accel::policy::ComputeType::float8)
    return 2e-2;
  if constexpr (Prec::compute == accel::policy::ComputeType::float16) return 5e-3;
  return 1e-5;
}

// The precisions this build refuses on CPU: Fp16 where libtorch has no fp16 matmul on CPU. Any
// other refusal fails the test.
template <class Prec>
inline constexpr bool refused_here =
    std::is_same_v<Prec, accel::Fp16> && !accel::detail::cpu_has_half_matmul;

// The policy's name as written in code.
template <class Par>
std::string spelled(Par*) {
  return std::string(Par::name);
}
template <class S>
std::string spelled(accel::Fsdp<S>*) {
  return fmt::format("Fsdp<{}>", S::name);
}

// Whether fp16 overflows depends on each rank's own part of the batch, so with PyTorch's default
// scale (2^16) the first step may overflow on one process and not on two (or the other way
// round), and the runs would differ by a whole step. A scale at which nothing overflows here
// leaves them differing by rounding only; skipping is tested on its own (scaler_agreement).
accel::Options matrix_options() {
  accel::Options options = test_options();
  options.loss_scaling.init_scale = 1024;
  return options;
}

template <class Par, class Prec, int Steps, auto make_model = model>
void matches_one_process() {
  using Accel = accel::Accelerator<Par, Prec, accel::GradAccum<Steps>>;
  const std::string label = fmt::format("{} with {}, GradAccum<{}>",
                                        spelled(static_cast<Par*>(nullptr)), Prec::name, Steps);
  std::optional<Accel> accelerator;
  try {
    accelerator.emplace(matrix_options());
  } catch (const accel::Error& refused) {
    // A precision this build cannot compute in (Fp16 on libtorch 1.13's CPU) is refused at
    // construction, on every rank alike, with accel's message; the
    // one-process run refuses it too.
    EXPECT(std::string(refused.what()).rfind("accel: ", 0) == 0);
    EXPECT(refused_here<Prec>);
    AloneInTheJob alone;
    bool also_alone = false;
    try {
      Accel one(matrix_options());
    } catch (const accel::Error&) {
      also_alone = true;
    }
    EXPECT(also_alone);
    if (std::getenv("RANK") && std::string(std::getenv("RANK")) == "0")
      fmt::print("{}: refused at construction: {}\n", label, refused.what());
    return;
  }
  const int world = accelerator->num_processes();
  auto net = train<Accel, make_model>(*accelerator, 4);
  auto reference = [&] {
    AloneInTheJob alone;
    Accel one(matrix_options());
    return train<Accel, make_model>(one, 4 * world);
  }();
  const auto full = accelerator->full_parameters(net);  // Zero3 and Fsdp<FullShard> gather
  const double worst = max_relative_difference(*net, *reference);
  if (accelerator->is_main_process())
    fmt::print("{}: max relative difference to one process {:.3g} (tolerance {:.0e})\n", label,
               worst, tolerance<Prec>());
  EXPECT(worst <= tolerance<Prec>());
  // Every rank holds the same model, bit for bit.
  const auto digests = accelerator->gather_object(accel::state::parameter_digest(*net));
  for (const auto d : digests) EXPECT(d == digests.front());
}

// Without accumulation, and with windows of two micro-steps (the loss scale fixed per window).
template <class Par, class... Prec>
void each_precision(std::tuple<Prec...>*) {
  ((matches_one_process<Par, Prec, 1>(), matches_one_process<Par, Prec, 2>()), ...);
}

template <class... Par>
void each_parallelism(std::tuple<Par...>*) {
  (each_precision<Par>(static_cast<Precisions*>(nullptr)), ...);
}

void precision_matrix() { each_parallelism(static_cast<MultiProcess*>(nullptr)); }

// An LR scheduler that counts its steps and leaves the rate alone.
struct CountingScheduler : torch::optim::LRScheduler {
  using LRScheduler::LRScheduler;
  int steps = 0;
  std::vector<double> get_lrs() override {
    ++steps;
    return get_current_lrs();
  }
};

// Six steps; at step 2 one element of the last rank's gradients becomes inf, at step 4 one of
// rank 0's nan: after the window's communication, so that only that rank sees it (for a sharded
// strategy, in that rank's shard of the gradients). Every rank must skip those two steps and
// only those, keep its parameters, optimizer and schedule there, and end with the same scale
// and the same model.
template <class Par>
void scaler_agreement() {
  accel::Options options = test_options();
  options.loss_scaling = {.init_scale = 1024, .growth_interval = 2};
  accel::Accelerator<Par, accel_test::LossScaledFp32> accelerator(options);
  const int rank = accelerator.process_index(), world = accelerator.num_processes();
  torch::manual_seed(static_cast<std::uint64_t>(1 + rank));
  auto net = model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  CountingScheduler counting(adam);
  accel::DataLoader loader(Regression(), {.batch_size = 4, .shuffle = true, .seed = 5});
  auto [prepared, optimizer, schedule, batches] = accelerator.prepare(net, adam, counting, loader);
  // Every rank reads the parameters whole (sharded at rest under Zero3 and Fsdp<FullShard>).
  const auto digest = [&] {
    const auto full = accelerator.full_parameters(net);
    return accel::state::parameter_digest(*net);
  };
  int step = 0;
  std::vector<int> skipped;
  for (int epoch = 0; epoch < 2; ++epoch)
  for (const auto& batch : batches) {
    if (step == 6) break;
    accelerator.backward(torch::mse_loss(prepared(batch.x), batch.y));
    const int poisoned_rank = step == 2 ? world - 1 : step == 4 ? 0 : -1;
    if (rank == poisoned_rank) {
      const float bad = step == 2 ? std::numeric_limits<float>::infinity()
                                  : std::numeric_limits<float>::quiet_NaN();
      torch::NoGradGuard no_grad;
      if constexpr (requires { internals(accelerator).strategy().flat_parameters(); }) {
        // This rank's shard of the averaged gradients (what its optimizer steps with).
        internals(accelerator).strategy().flat_parameters().front()->shard_gradient()[0] = bad;
      } else {
        net->parameters().front().mutable_grad()[0][0] = bad;
      }
    }
    const auto before = digest();
    const int scheduled = counting.steps;
    optimizer.step();
    schedule.step();
    optimizer.zero_grad();
    const bool was_skipped = accelerator.optimizer_step_was_skipped();
    if (was_skipped) {
      EXPECT(digest() == before);
      EXPECT(counting.steps == scheduled);
      skipped.push_back(step);
    } else {
      EXPECT(digest() != before);
      EXPECT(counting.steps == scheduled + 1);
    }
    ++step;
  }
  EXPECT((skipped == std::vector<int>{2, 4}));
  // 1024, grown to 2048 after two clean steps, backed off at 2 and 4: 512, one clean step since.
  EXPECT((internals(accelerator).precision_state() == accel::precision::LossScaleState{512.0f, 1}));
  EXPECT(internals(accelerator).precision().skipped_steps() == 2);
  const auto digests = accelerator.gather_object(digest());
  for (const auto d : digests) EXPECT(d == digests.front());
  const auto scales = accelerator.gather_object(internals(accelerator).precision_state().scale);
  for (const auto s : scales) EXPECT(s == scales.front());
}

}  // namespace

int run(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"precision_matrix", precision_matrix},
      // accel::Sharded units in a ModuleList, against one process, under Fp32 and Bf16.
      {"sharded_blocks_zero3",
       [] {
         matches_one_process<accel::Zero3, accel::Fp32, 2, blocks_model>();
         matches_one_process<accel::Zero3, accel::Bf16, 2, blocks_model>();
         matches_one_process<accel::Fsdp<accel::FullShard>, accel::Bf16, 1, blocks_model>();
       }},
      {"scaler_agreement_ddp", scaler_agreement<accel::Ddp>},
      {"scaler_agreement_zero2", scaler_agreement<accel::Zero2>},
      {"scaler_agreement_fsdp_shard_grad_op", scaler_agreement<accel::Fsdp<accel::ShardGradOp>>},
      {"scaler_agreement_fsdp_no_shard", scaler_agreement<accel::Fsdp<accel::NoShard>>},
      {"scaler_agreement_zero3", scaler_agreement<accel::Zero3>},
      {"scaler_agreement_fsdp_full_shard", scaler_agreement<accel::Fsdp<accel::FullShard>>},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker_precision
