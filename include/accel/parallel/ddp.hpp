// Ddp: replicated parameters, gradients averaged across ranks on the micro-step that ends an
// accumulation window (no communication on the others). Parameters and buffers are broadcast
// from rank 0 at prepare, so every rank starts from the same model.
//
// This version averages all gradients in one coalesced all-reduce after backward returns.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "../policy/parallelism.hpp"
#include "../runtime/process_group.hpp"
#include "local.hpp"

namespace accel::parallel {

template <>
struct Strategy<Ddp> : LocalStrategy {
  runtime::ProcessGroup* group = nullptr;

  void attach(runtime::ProcessGroup* process_group) { group = process_group; }

  void prepare_model(torch::nn::Module& module) {
    if (group == nullptr) return;
    torch::NoGradGuard no_grad;
    for (auto& p : module.parameters()) broadcast_into(p);
    for (auto& b : module.buffers()) broadcast_into(b);
  }

  void after_backward(bool sync, std::vector<torch::Tensor> parameters) {
    if (group == nullptr || !sync) return;
    // Every rank must send the same layout: a parameter without a gradient here (unused in this
    // rank's forward) contributes zeros.
    std::vector<torch::Tensor> grads;
    for (auto& p : parameters) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad());
    }
    if (grads.empty()) return;
    std::vector<torch::Tensor> flat;
    flat.reserve(grads.size());
    for (const auto& g : grads) flat.push_back(g.reshape(-1));
    torch::Tensor bucket = torch::cat(flat);
    group->allreduce(bucket, runtime::ReduceOp::mean);
    std::int64_t offset = 0;
    for (auto& g : grads) {
      g.copy_(bucket.narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
  }

 private:
  void broadcast_into(torch::Tensor& tensor) {
    torch::Tensor copy = tensor.detach().contiguous();
    group->broadcast(copy, 0);
    tensor.detach().copy_(copy);
  }
};

// FSDP's NO_SHARD is DDP.
template <>
struct Strategy<Fsdp<NoShard>> : Strategy<Ddp> {};

}  // namespace accel::parallel
