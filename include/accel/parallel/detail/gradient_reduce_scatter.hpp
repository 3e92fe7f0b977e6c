// How a sharded strategy's full gradients become this rank's shard gradients: one of the three
// parts of sharded_strategy.hpp, beside the flat parameters (flat_parameter_set.hpp) and the
// shard optimizers (shard_optimizers.hpp).
//
// Kept apart because it is the one part that talks to the other ranks about gradients, and
// both strategies drive it on their own schedule: Zero2 starts a bucket's reduce-scatter as
// soon as its gradients are in and lands it later (start, then add_to_shard), Zero3 sends a
// unit's once its backward is done (reduce_scatter). Under Fsdp<HybridShard> the shards split
// within a node, and each shard gradient is then averaged across the nodes (the replica group):
// each node as many ranks, so the mean of the means is the mean.
//
// It also keeps where a window's gradients are: in the full flat gradients while the window
// collects, in the shards once its last micro-step reduce-scattered them. Clipping, loss
// scaling and the norm's reduction (reduce_norm) read that.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <optional>
#include <string_view>

#include "../../detail/separate_compilation.hpp"
#include "../../runtime/process_group.hpp"
#include "flat_parameter_set.hpp"

namespace accel::parallel::detail {

class GradientReduceScatter {
 public:
  explicit GradientReduceScatter(FlatParameterSet& flats) : flats_(flats) {}
  GradientReduceScatter(const GradientReduceScatter&) = delete;
  GradientReduceScatter& operator=(const GradientReduceScatter&) = delete;

  // shards: the ranks the shards split across (null on one process); replicas: the ranks
  // holding the same shard on other nodes, or null.
  void use_groups(runtime::ProcessGroup* shards, runtime::ProcessGroup* replicas) {
    shards_ = shards;
    replicas_ = replicas;
  }
  // Options::sharded_communication.gradients: the dtype the full gradients travel in, or unset
  // for their own; `strategy` names the policy in errors.
  void send_in(std::optional<torch::Dtype> wire, std::string_view strategy) {
    wire_ = wire;
    strategy_ = strategy;
  }

  // Flat parameter f's full gradient reduce-scattered (mean): wait() for it, then add_to_shard()
  // and release the full gradient. Where this rank holds none (no backward reached f since its
  // last reduce-scatter), zeros are sent: the other ranks may hold some. In place where the
  // shared-memory path carries it: the chunk lands in this rank's part of the buffer itself
  // (dead once sent), so no buffer of the shard's size is allocated per reduce-scatter. In a
  // narrower wire dtype the gradient is divided by the ranks into a copy of that dtype, which is
  // summed and receives the chunk instead, and the full gradient is released at once.
  ACCEL_DECL runtime::ProcessGroup::PendingCollective start(std::size_t f);
  // Flat parameter f's reduce-scattered (averaged) gradient, averaged across the nodes too under
  // Fsdp<HybridShard>, added to its shard gradient; f is no longer pending.
  ACCEL_DECL void add_to_shard(std::size_t f, torch::Tensor averaged);

  // Whether the window's gradients live in the shards (after its reduce-scatter) rather than in
  // the full local gradients.
  bool in_shards() const { return in_shards_; }
  void set_in_shards(bool in_shards) { in_shards_ = in_shards; }

  // The shards' parts of the norm add up across the ranks sharing them (or their maximum is
  // taken) once the gradients are sharded; before, each rank measures its own full gradients.
  // (Fsdp<HybridShard>'s nodes hold the same shards: one node's sum is the whole.)
  ACCEL_DECL torch::Tensor reduce_norm(torch::Tensor local, bool is_max);

 private:
  FlatParameterSet& flats_;
  runtime::ProcessGroup* shards_ = nullptr;
  runtime::ProcessGroup* replicas_ = nullptr;
  std::optional<torch::Dtype> wire_;
  std::string_view strategy_;
  bool in_shards_ = false;
};

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/gradient_reduce_scatter.ipp"
#endif
