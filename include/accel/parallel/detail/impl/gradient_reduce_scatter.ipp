// GradientReduceScatter's members (gradient_reduce_scatter.hpp includes this file in
// header-only mode).
#pragma once

#include <algorithm>
#include <cstdint>

#include "../gradient_reduce_scatter.hpp"
#include "../sharded_communication.hpp"

namespace accel::parallel::detail {

ACCEL_DECL runtime::ProcessGroup::PendingCollective GradientReduceScatter::start(std::size_t f) {
  FlatParameter& flat = flats_[f];
  const std::int64_t shard = flat.layout().shard_numel;
  // A handle, released below when narrowed; zeros where this rank has no gradient to send.
  const torch::Tensor full = flat.gradient().defined()
                                 ? flat.gradient()
                                 : flat.full_size_buffer(flat.flat().scalar_type()).zero_();
  if (!narrows(wire_, full))
    return shards_->reduce_scatter_async(full, runtime::ReduceOp::mean,
                                         full.narrow(0, flat.rank() * shard, shard));
  torch::Tensor sent = flat.full_size_buffer(*wire_);
  require_narrow_wire(*shards_, sent, strategy_, "gradients");
  // Divided before the cast, as PyTorch's fp16 compression does: the ranks' fp16 values then sum
  // without overflowing. Piece by piece: a cast into another dtype computes into a temporary of
  // the output's size, which for a whole unit is mapped fresh (page faults) at every
  // reduce-scatter.
  const torch::Tensor divisor = torch::scalar_tensor(shards_->size(), full.options());
  constexpr std::int64_t piece = std::int64_t{1} << 18;
  for (std::int64_t begin = 0; begin < full.numel(); begin += piece) {
    const std::int64_t length = std::min(piece, full.numel() - begin);
    torch::Tensor out = sent.narrow(0, begin, length);
    torch::div_out(out, full.narrow(0, begin, length), divisor);
  }
  flat.release_gradients();  // the copy travels: the full gradient's memory can go now
  return shards_->reduce_scatter_async(sent, runtime::ReduceOp::sum,
                                       sent.narrow(0, flat.rank() * shard, shard));
}

ACCEL_DECL void GradientReduceScatter::add_to_shard(std::size_t f, torch::Tensor averaged) {
  torch::NoGradGuard no_grad;
  torch::Tensor& shard_gradient = flats_[f].shard_gradient();  // on the CPU: offload.parameters
  if (replicas_ != nullptr) {
    if (averaged.scalar_type() != shard_gradient.scalar_type())
      require_narrow_wire(*replicas_, averaged, strategy_, "gradients");
    replicas_->allreduce(averaged, runtime::ReduceOp::mean);
  }
  shard_gradient.add_(averaged.to(shard_gradient.device(), shard_gradient.scalar_type()));
  flats_.clear_pending(f);
}

ACCEL_DECL torch::Tensor GradientReduceScatter::reduce_norm(torch::Tensor local, bool is_max) {
  if (shards_ == nullptr || !in_shards_) return local;
  torch::Tensor combined = local.reshape({1}).clone();  // Gloo takes one-element tensors
  shards_->allreduce(combined, is_max ? runtime::ReduceOp::max : runtime::ReduceOp::sum);
  return combined;
}

}  // namespace accel::parallel::detail
