// A short self-check of this machine and build across the processes of one launch, as
// `accel-launch test` runs it (Accelerate's `accelerate test`): every collective the library
// uses, on the paths it uses them (native and fallback, fp32 and bf16 on the wire), then a few
// Ddp and Zero2 optimizer steps compared with one process training on the global batch. Every
// rank runs every check; the main process prints one PASS or FAIL line per check, naming the
// rank and what it saw on a failure.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "../accelerator_class.hpp"
#include "../parallel/zero2.hpp"
#include "../runtime/fallback_transport.hpp"
#include "../runtime/nccl.hpp"

namespace accel::diagnostics {

namespace self_check {

struct Sample {
  torch::Tensor x, y;
};

// A fixed regression problem of `n` samples, the same on every rank.
struct Regression {
  torch::Tensor inputs, targets;
  explicit Regression(std::int64_t n) {
    torch::manual_seed(99);
    inputs = torch::randn({n, 5});
    targets = inputs.matmul(torch::linspace(-1, 1, 5)).unsqueeze(1);
  }
  std::int64_t size() const { return inputs.size(0); }
  Sample get(std::int64_t i) const { return {inputs[i], targets[i]}; }
};

inline torch::nn::Sequential model() {
  return torch::nn::Sequential(torch::nn::Linear(5, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
}

// The first values of `t`, for messages: "[0, 1, 2, ...] (shape [6])".
inline std::string values_text(const torch::Tensor& t) {
  const torch::Tensor flat = t.detach().flatten().to(torch::kDouble).contiguous();
  std::string text = "[";
  for (std::int64_t i = 0; i < std::min<std::int64_t>(flat.numel(), 8); ++i)
    text += fmt::format("{}{}", i > 0 ? ", " : "", flat[i].item<double>());
  text += flat.numel() > 8 ? ", ...]" : "]";
  std::string shape;
  for (const auto size : t.sizes()) shape += fmt::format("{}{}", shape.empty() ? "" : ", ", size);
  return fmt::format("{} (shape [{}])", text, shape);
}

// Empty when `got` equals `expected` (within `tolerance`), else both in words.
inline std::string compare(std::string_view what, const torch::Tensor& got,
                           const torch::Tensor& expected, double tolerance = 0.0) {
  const torch::Tensor a = got.to(torch::kDouble), b = expected.to(torch::kDouble);
  if (a.sizes() == b.sizes() && (a.numel() == 0 || (a - b).abs().max().item<double>() <= tolerance))
    return {};
  return fmt::format("{}: got {}, expected {}", what, values_text(got), values_text(expected));
}

// Trains 2 epochs of `steps_per_epoch` optimizer steps of Adam under Accelerator `Accel` (each rank 4 samples per
// step), and the same from the same initial weights on one process with batches of W x 4;
// empty when the parameters agree to 1e-5 relative.
template <class Accel>
std::string matches_one_process(std::int64_t steps_per_epoch) {
  Accel accelerator({.device = torch::Device(torch::kCPU), .timeout = std::chrono::seconds(60)});
  const std::int64_t world = accelerator.num_processes(), per_rank = 4;
  const Regression data(world * per_rank * steps_per_epoch);
  torch::manual_seed(static_cast<std::uint64_t>(1 + accelerator.process_index()));
  auto net = model();  // differs per rank: prepare() must broadcast rank 0's weights
  torch::optim::Adam adam(net->parameters(), 0.01);
  DataLoader loader(data, {.batch_size = per_rank, .shuffle = true, .seed = 5});
  auto [prepared, optimizer, batches] = accelerator.prepare(net, adam, loader);
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : batches) {
      accelerator.backward(torch::mse_loss(prepared(batch.x), batch.y));
      optimizer.step();
      optimizer.zero_grad();
    }

  torch::manual_seed(1);
  auto reference = model();
  torch::optim::Adam reference_adam(reference->parameters(), 0.01);
  DataLoader global(data, {.batch_size = per_rank * world, .shuffle = true, .seed = 5});
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : global) {
      torch::mse_loss(reference->forward(batch.x), batch.y).backward();
      reference_adam.step();
      reference_adam.zero_grad();
    }
  double worst = 0;
  for (std::size_t i = 0; i < net->parameters().size(); ++i) {
    const auto a = net->parameters()[i], b = reference->parameters()[i];
    worst = std::max(worst, ((a - b).abs().max() / b.abs().max()).item<double>());
  }
  if (worst <= 1e-5) return {};
  return fmt::format("parameters differ from one process by {:.3g} (relative), above 1e-5", worst);
}

}  // namespace self_check

// Runs every check on this rank; the main process writes a line per check to `out`. Returns
// 0 when every check passed on every rank, 1 otherwise. Every rank must call it.
inline int self_test(std::FILE* out = stdout) {
  using self_check::compare;
  Accelerator<Ddp> accelerator(
      {.device = torch::Device(torch::kCPU), .timeout = std::chrono::seconds(60)});
  runtime::ProcessGroup* group = accel::testing::internals(accelerator).process_group();
  const std::int64_t rank = accelerator.process_index(), world = accelerator.num_processes();
  const bool main = accelerator.is_main_process();
  int failed = 0;
  if (main)
    fmt::print(out, "accel self-test on {} process(es), libtorch {}\n", world, TORCH_VERSION);

  // `body` returns what went wrong on this rank (empty: nothing). The ranks then agree.
  auto check = [&](std::string_view name, const std::function<std::string()>& body) {
    std::string problem;
    try {
      problem = body();
    } catch (const std::exception& error) {
      problem = fmt::format("threw: {}", error.what());
    }
    const std::vector<std::string> problems = accelerator.gather_object(problem);
    std::string report;
    for (std::size_t r = 0; r < problems.size(); ++r)
      if (!problems[r].empty()) report += fmt::format("\n    rank {}: {}", r, problems[r]);
    if (!report.empty()) ++failed;
    if (main) {
      fmt::print(out, "{} {}{}\n", report.empty() ? "PASS" : "FAIL", name, report);
      std::fflush(out);
    }
  };
  const torch::Tensor base = torch::arange(6, torch::kFloat);
  const double w = static_cast<double>(world), r = static_cast<double>(rank);

  check("rendezvous and barrier", [&] {
    accelerator.wait_for_everyone();
    return std::string();
  });
  // ACCEL_SELF_TEST_FAULT=<rank>: that rank sends a wrong value in the first all-reduce, so that
  // a FAIL line and the exit status can be seen (tests of the self-test itself).
  const char* fault = std::getenv("ACCEL_SELF_TEST_FAULT");
  const bool faulty = fault != nullptr && *fault != '\0' && std::atoll(fault) == rank;
  check("allreduce sum, mean, max, min (fp32)", [&] {
    std::string problem;
    auto run = [&](ReduceOp op, const torch::Tensor& expected, std::string_view label) {
      if (!problem.empty()) return;
      torch::Tensor t = base + r + (faulty ? 1 : 0);
      if (group) group->allreduce(t, op);
      problem = compare(label, t, expected);
    };
    run(ReduceOp::sum, base * w + w * (w - 1) / 2, "sum");
    run(ReduceOp::mean, base + (w - 1) / 2, "mean");
    run(ReduceOp::max, base + (w - 1), "max");
    run(ReduceOp::min, base, "min");
    return problem;
  });
  check("allreduce sum (bf16, fp32 on a wire without bf16)", [&] {
    torch::Tensor t = torch::full({5}, r + 1, torch::kBFloat16);
    if (group) group->allreduce(t);
    return compare("bf16 sum", t, torch::full({5}, w * (w + 1) / 2));
  });
  check("allreduce started asynchronously, then waited for (Ddp's buckets)", [&] {
    torch::Tensor t = base + r;
    if (group) group->allreduce_async(t).wait();
    return compare("sum", t, base * w + w * (w - 1) / 2);
  });
  check("allreduce on buffers registered with Gloo (Ddp's small buckets)", [&] {
    torch::Tensor t = base + r;
    if (group) {
      auto registered = group->register_allreduce(t);
      registered.run();
    }
    return compare("sum", t, base * w + w * (w - 1) / 2);
  });
  check("broadcast from the first and from the last rank", [&] {
    for (const std::int64_t root : {std::int64_t{0}, world - 1}) {
      torch::Tensor t = torch::full({3, 2}, r);
      if (group) group->broadcast(t, static_cast<int>(root));
      if (auto problem = compare(fmt::format("from rank {}", root), t,
                                 torch::full({3, 2}, static_cast<double>(root)));
          !problem.empty())
        return problem;
    }
    return std::string();
  });
  const torch::Tensor gathered = torch::arange(world, torch::kFloat).repeat_interleave(2);
  check("allgather (native where the backend has it, and the list fallback)", [&] {
    for (const bool native : {true, false}) {
      const torch::Tensor t = !group ? torch::full({2}, r)
                              : native ? group->allgather(torch::full({2}, r))
                                       : testing::Fallbacks(*group).allgather(torch::full({2}, r));
      if (auto problem = compare(native ? "native" : "fallback", t, gathered); !problem.empty())
        return problem;
    }
    return std::string();
  });
  check("allgather into a flat buffer (Zero2's parameter gather), fp32 and bf16", [&] {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16})
      for (const bool native : {true, false}) {
        torch::Tensor output = torch::empty({2 * world}, dtype);
        const torch::Tensor input = torch::full({2}, r, dtype);
        if (!group) output.copy_(input);
        else if (native) group->allgather_into(output, input);
        else testing::Fallbacks(*group).allgather_into(output, input);
        if (auto problem = compare(fmt::format("{} {}", c10::toString(dtype),
                                               native ? "native" : "fallback"),
                                   output, gathered);
            !problem.empty())
          return problem;
      }
    return std::string();
  });
  check("reduce_scatter sum and mean (Zero2's gradients), native and through alltoall", [&] {
    const torch::Tensor input = torch::arange(3 * world, torch::kFloat) + r;
    const torch::Tensor mine = torch::arange(3 * rank, 3 * rank + 3, torch::kFloat);
    for (const bool native : {true, false})
      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
        const torch::Tensor got = !group ? input
                                  : native ? group->reduce_scatter(input, op)
                                           : testing::Fallbacks(*group).reduce_scatter(input, op);
        const torch::Tensor sum = mine * w + w * (w - 1) / 2;
        if (auto problem = compare(fmt::format("{} {}", op == ReduceOp::sum ? "sum" : "mean",
                                               native ? "native" : "alltoall"),
                                   got, op == ReduceOp::sum ? sum : sum / w);
            !problem.empty())
          return problem;
      }
    return std::string();
  });
  check("gather of uneven tensors, gather_object, pad_across_processes", [&] {
    const torch::Tensor rows = accelerator.gather(torch::full({rank + 1, 2}, r));
    std::vector<torch::Tensor> parts;
    for (std::int64_t k = 0; k < world; ++k) parts.push_back(torch::full({k + 1, 2}, static_cast<double>(k)));
    if (auto problem = compare("gather", rows, torch::cat(parts)); !problem.empty()) return problem;
    const auto names = accelerator.gather_object(fmt::format("rank {}", rank));
    for (std::int64_t k = 0; k < world; ++k)
      if (names[static_cast<std::size_t>(k)] != fmt::format("rank {}", k))
        return fmt::format("gather_object: entry {} is '{}'", k, names[static_cast<std::size_t>(k)]);
    const torch::Tensor padded = accelerator.pad_across_processes(torch::ones({rank + 1}));
    return compare("pad_across_processes", padded,
                   torch::cat({torch::ones({rank + 1}), torch::zeros({world - rank - 1})}));
  });
  // Where this libtorch has c10d's NCCL and a GPU is visible: the collectives the strategies run
  // on CUDA tensors, over an NCCL group of this launch's ranks on cuda:<local rank>, made here
  // even for one process (an Accelerator makes none there).
  if (runtime::has_nccl && torch::cuda::is_available()) {
    const auto local = static_cast<c10::DeviceIndex>(accelerator.local_process_index());
    const torch::Device cuda(torch::kCUDA, local);
    check(fmt::format("NCCL on {}: allreduce, broadcast, allgather into a flat buffer, "
                      "reduce_scatter (fp32 and bf16)",
                      cuda.str()),
          [&] {
            runtime::GroupSettings settings = runtime::with_environment(
                {.timeout = std::chrono::seconds(60), .rendezvous_timeout = std::chrono::seconds(60)});
            settings.cuda_device = local;
            runtime::ProcessGroup nccl(accel::testing::internals(accelerator).environment(), settings);
            for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
              const std::string kind(c10::toString(dtype));
              torch::Tensor sum = (base + r).to(cuda, dtype);
              nccl.allreduce(sum);
              torch::Tensor root = torch::full({3}, r, torch::TensorOptions(dtype).device(cuda));
              nccl.broadcast(root, static_cast<int>(world - 1));
              torch::Tensor flat = torch::empty({2 * world}, torch::TensorOptions(dtype).device(cuda));
              nccl.allgather_into(flat, torch::full({2}, r, torch::TensorOptions(dtype).device(cuda)));
              const torch::Tensor input = (torch::arange(3 * world, torch::kFloat) + r).to(cuda, dtype);
              const torch::Tensor mine = torch::arange(3 * rank, 3 * rank + 3, torch::kFloat);
              const torch::Tensor scattered = nccl.reduce_scatter(input, ReduceOp::mean);
              for (const auto& [what, got, expected] :
                   {std::tuple{"allreduce", sum, base * w + w * (w - 1) / 2},
                    std::tuple{"broadcast", root, torch::full({3}, w - 1)},
                    std::tuple{"allgather_into", flat, gathered},
                    std::tuple{"reduce_scatter", scattered, mine + (w - 1) / 2}})
                if (auto problem = compare(fmt::format("{} {}", kind, what), got.cpu().to(torch::kFloat), expected);
                    !problem.empty())
                  return problem;
            }
            return std::string();
          });
  }
  check("Ddp: 12 Adam steps match one process on the global batch", [&] {
    return self_check::matches_one_process<Accelerator<Ddp>>(6);
  });
  check("Zero2: 12 Adam steps match one process on the global batch", [&] {
    return self_check::matches_one_process<Accelerator<Zero2>>(6);
  });

  if (main)
    fmt::print(out, "accel self-test: {}\n",
               failed == 0 ? fmt::format("all checks passed on {} process(es)", world)
                           : fmt::format("{} check(s) FAILED", failed));
  std::fflush(out);
  // No rank leaves (and, failing, brings the launch down) before the main one has reported.
  accelerator.wait_for_everyone();
  return failed == 0 ? 0 : 1;
}

}  // namespace accel::diagnostics
