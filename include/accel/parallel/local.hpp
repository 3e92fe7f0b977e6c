// What every parallelism policy does on one process: nothing to communicate, so each
// degenerates to plain local training (world size 1 is valid for every policy). Strategies
// derive from LocalStrategy and replace the hooks they need.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "../detail/error.hpp"
#include "../options.hpp"
#include "../runtime/process_group.hpp"
#include "../state/memory_use.hpp"
#include "strategy.hpp"

namespace accel::parallel {

struct LocalStrategy {
  // label names the model in errors ("prepared model #2 (Discriminator)").
  void prepare_model(torch::nn::Module& /*module*/, const std::string& /*label*/) {}
  template <class Optimizer>
  void prepare_optimizer(Optimizer& /*optimizer*/) {}
  void before_forward(torch::nn::Module& /*module*/) {}
  template <class Outputs>
  void after_forward(torch::nn::Module& /*module*/, const Outputs& /*outputs*/) {}
  void before_backward(bool /*sync*/) {}
  void after_backward(bool /*sync*/) {}
  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    optimizer.step();
  }
  // In place rather than set to none: the next backward accumulates into the same storage
  // instead of allocating (docs/benchmarks.md, accel_overhead), and gradients that are views of
  // communication buckets stay views.
  template <class Optimizer>
  void zero_grad(Optimizer& optimizer) {
    torch::NoGradGuard no_grad;
    for (auto& group : optimizer.param_groups())
      for (auto& p : group.params())
        if (p.grad().defined()) p.mutable_grad().zero_();
  }
  // The gradients clip_grad_norm measures and scales for these parameters: this process's part
  // of them (all of them where gradients are replicated).
  std::vector<torch::Tensor> gradients_to_clip(const std::vector<torch::Tensor>& parameters) const {
    std::vector<torch::Tensor> grads;
    for (const auto& p : parameters)
      if (p.grad().defined()) grads.push_back(p.grad());
    return grads;
  }
  // The gradients `optimizer` steps with on this process, for loss scaling to unscale and check.
  std::vector<torch::Tensor> gradients_of(const torch::optim::Optimizer& optimizer) const {
    std::vector<torch::Tensor> grads;
    for (const auto& group : optimizer.param_groups())
      for (const auto& p : group.params())
        if (p.grad().defined()) grads.push_back(p.grad());
    return grads;
  }
  // Combines this process's part of the gradient norm (the sum of |g|^p, or the max |g| for the
  // infinity norm) with the other ranks'; one process holds it all.
  torch::Tensor reduce_norm(torch::Tensor local, bool /*is_max*/) { return local; }
  // Where parameters are sharded at rest, gathers a model's full parameters for code outside
  // its forward, and writes them back to the shards after; elsewhere they are always whole.
  // What the strategy holds beyond the prepared parameters, their .grad and the prepared
  // optimizers' state (Accelerator::memory_use()).
  void count_memory(state::MemoryCounter& /*counter*/) const {}
  void gather_full(torch::nn::Module& /*module*/) {}
  void release_full(torch::nn::Module& /*module*/) {}
};

// A policy whose multi-process path is not built yet runs on one process only, and says so
// rather than train each rank on its own.
template <class Par>
struct SingleProcessOnly : LocalStrategy {
  void attach(runtime::ProcessGroup* group, const Options& /*options*/) {
    if (group != nullptr)
      accel::detail::fail("{} across {} processes is not available in this version of accel; use Ddp "
                   "(or Fsdp<NoShard>) for multi-process training, or run one process",
                   Par::name, group->size());
  }
};

}  // namespace accel::parallel
