// Zero2 (DeepSpeed ZeRO stage 2; Fsdp<ShardGradOp> is the same memory model): parameters
// replicated, gradients and optimizer state sharded across ranks.
//
//   prepare(model)      parameters and buffers broadcast from rank 0; the trainable parameters of
//                       each dtype flattened into one buffer padded to a multiple of the world
//                       size (detail/flat_parameter.hpp); rank r owns its r-th contiguous shard.
//   backward            gradients accumulate into a full flat gradient buffer (each .grad a view
//                       of it); on the micro-step that ends a window, after autograd, that buffer
//                       is reduce-scattered (mean) into this rank's shard gradient and released.
//                       No communication on the other micro-steps.
//   optimizer.step()    an optimizer of the user's type steps this rank's shard
//                       (detail/sharded_strategy.hpp); the updated shards are all-gathered back
//                       into every rank's flat buffer.
//
// The reduce-scatter runs after backward rather than bucket by bucket during it: correct first;
// overlapping it with autograd, as Ddp does, is the next step (docs/distributed.md#zero2).
//
// Gradients are linear in the loss, so a window's reduce-scatters may be split: a model reached
// by several backward() calls of one micro-step (a GAN) is reduce-scattered after each, and each
// result is added to its shard gradient.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "../policy/parallelism.hpp"
#include "detail/sharded_strategy.hpp"

namespace accel::parallel {

class ShardedGradientStrategy : public detail::ShardedStrategy<ShardedGradientStrategy> {
  using Base = detail::ShardedStrategy<ShardedGradientStrategy>;
  friend Base;

 public:
  using Base::Base;

  void prepare_model(torch::nn::Module& module, const std::string& label) {
    if (group_ == nullptr) return;
    begin_prepare(module, label);
    // Trainable parameters by (dtype, device), in registration order. A parameter registered
    // under two names (tied weights), or already flattened with a model prepared earlier, is
    // flattened once.
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& item : module.named_parameters()) named.emplace_back(item.key(), item.value());
    flatten(named, label, detail::Residency::replicated);
  }

  void before_backward(bool sync) {
    if (group_ == nullptr) return;
    begin_backward(sync);
    for (auto& flat : flats_) flat->attach_gradients();
  }

  void after_backward(bool sync) {
    if (group_ == nullptr || !sync) return;
    for (std::size_t f = 0; f < flats_.size(); ++f) reduce_scatter_gradient(f);
    sharded_ = true;
  }

 private:
  void gradient_arrived(std::size_t /*flat*/) {}  // pending_ is all Zero2 needs

  // Every rank's updated shard, back into every rank's full flat buffer.
  void after_shard_step(const std::vector<std::size_t>& flats) {
    torch::NoGradGuard no_grad;
    for (const std::size_t f : flats) {
      detail::FlatParameter& flat = *flats_[f];
      shard_group_->allgather_into(flat.flat(), flat.shard());
    }
  }
};

template <>
struct Strategy<Zero2> : ShardedGradientStrategy {
  Strategy() : ShardedGradientStrategy(Zero2::name) {}
};

}  // namespace accel::parallel
