// Parallel<Ddp, TensorParallel<N>>: Megatron-LM's tensor parallelism inside groups of N
// consecutive ranks, Ddp across the groups. Ranks 0..N-1 form tensor-parallel group 0, N..2N-1
// group 1, and so on (Megatron's order, and torch's DeviceMesh with dimensions ("dp", "tp")); the
// ranks of the same place in every group form a data-parallel group. The subgroups are made as
// Fsdp<HybridShard> makes its own (runtime::ProcessGroup::split).
//
//   prepare_model   rank 0's full model on every rank (as Ddp), then every ColumnParallelLinear
//                   and RowParallelLinear narrowed to this rank's slice
//                   (tensor_parallel_linear.hpp), then Ddp over the data-parallel group: its
//                   replicas hold the same slices
//   gradients       the split layers' collectives run inside their forward and backward; Ddp
//                   averages every gradient over the data-parallel group only (with one group
//                   there is nothing to average). A replicated parameter (a LayerNorm, an
//                   embedding, a frozen or plain Linear) has the same gradient on every rank of a
//                   tensor-parallel group, because everything outside the split layers computes
//                   the same numbers there: each rank's batch is its group's batch, a column
//                   layer's input gradient is summed over the group, and a row layer's output is
//                   summed before anything else sees it. So they stay equal without a collective.
//   clip_grad_norm  each rank adds its slices' share of the norm and 1/N of each replicated
//                   gradient's, summed over the tensor-parallel group: every element counted once
//   full_parameters the split layers' slices gathered into the full weights, and back after
//
// The loaders deal batches by data-parallel rank (the Accelerator reads the degree: every rank of
// a tensor-parallel group gets the same batch). Checkpoints are refused (state/checkpoint_io.hpp).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "../detail/error.hpp"
#include "../policy/tensor_parallel.hpp"
#include "../runtime/process_group.hpp"
#include "ddp.hpp"
#include "detail/broadcast.hpp"
#include "tensor_parallel_linear.hpp"

namespace accel::parallel {

// A world of `world` ranks splits into tensor-parallel groups of `degree` only when the degree
// divides it; said as the Accelerator is made, before any group is split.
inline void check_tensor_parallel_world(int world, int degree, std::string_view policy) {
  if (world % degree != 0)
    accel::detail::fail("{}: the world size {} is not a multiple of the tensor-parallel degree "
                        "{}; start a multiple of {} processes (accel-launch --nproc), or use "
                        "TensorParallel<N> with an N that divides {}",
                        policy, world, degree, degree, world);
}

template <int N>
struct Strategy<policy::Composed<Ddp, TensorParallel<N>>> : Strategy<Ddp> {
  Strategy() { name_ = policy::Composed<Ddp, TensorParallel<N>>::name; }

  void attach(runtime::ProcessGroup* group, const Options& options) {
    check_tensor_parallel_world(group == nullptr ? 1 : group->size(), N, name_);
    world_ = group;
    runtime::ProcessGroup* data = group;
    if (group != nullptr) {
      // One host: every group on loopback and shared memory; across hosts the groups go through
      // the network (a tensor-parallel group may span two of them).
      const bool one_host = group->local_size() == group->size();
      if (N > 1) tensor_ = group->split("tensor", group->rank() / N, one_host);
      if (N > 1 && group->size() > N) {
        data_ = group->split("data", group->rank() % N, one_host);
        data = data_.get();
      } else if (N > 1) {
        data = nullptr;  // one tensor-parallel group: no replica to average with
      }
    }
    Strategy<Ddp>::attach(data, options);
  }

  void prepare_model(torch::nn::Module& module, const std::string& label) {
    if (world_ != nullptr) {
      // Every rank slices rank 0's full weights, as one process would hold them.
      torch::NoGradGuard no_grad;
      detail::broadcast_from_root(*world_, module.parameters());
      detail::broadcast_from_root(*world_, module.buffers());
    }
    if (tensor_ != nullptr)
      for (auto& p : split_tensor_parallel_layers(module, *tensor_, label))
        split_.push_back(std::move(p));
    Strategy<Ddp>::prepare_model(module, label);
  }

  // clip_grad_norm (detail/clip.hpp): the share of a gradient's |g|^p this rank adds before
  // reduce_norm sums over the tensor-parallel group: all of a slice's, 1/N of a replicated one's.
  double norm_share(const torch::Tensor& gradient) const {
    if (tensor_ == nullptr) return 1.0;
    for (const auto& p : split_)
      if (p.grad().defined() && p.grad().unsafeGetTensorImpl() == gradient.unsafeGetTensorImpl())
        return 1.0;
    return 1.0 / N;
  }
  torch::Tensor reduce_norm(torch::Tensor local, bool is_max) {
    if (tensor_ != nullptr)
      tensor_->allreduce(local, is_max ? runtime::ReduceOp::max : runtime::ReduceOp::sum);
    return local;
  }

  void gather_full(torch::nn::Module& module) { gather_tensor_parallel_layers(module); }
  void release_full(torch::nn::Module& module) { release_tensor_parallel_layers(module); }

  // The ranks this rank's layers are split across (null on one process and at
  // TensorParallel<1>).
  const runtime::ProcessGroup* tensor_parallel_group() const { return tensor_.get(); }

 private:
  runtime::ProcessGroup* world_ = nullptr;
  std::unique_ptr<runtime::ProcessGroup> tensor_, data_;
  std::vector<torch::Tensor> split_;  // the parameters each rank of a group holds part of
};

}  // namespace accel::parallel
