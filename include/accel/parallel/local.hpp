// What every parallelism policy does on one process: nothing to communicate, so each
// degenerates to plain local training (world size 1 is valid for every policy).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "../detail/error.hpp"
#include "../options.hpp"
#include "../policy/concepts.hpp"
#include "../runtime/process_group.hpp"
#include "strategy.hpp"

namespace accel::parallel {

struct LocalStrategy {
  void prepare_model(torch::nn::Module& /*module*/) {}
  void before_forward(torch::nn::Module& /*module*/) {}
  void before_backward(bool /*sync*/) {}
  void after_backward(bool /*sync*/) {}
  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    optimizer.step();
  }
  // Combines this process's part of the gradient norm (the sum of |g|^p, or the max |g| for the
  // infinity norm) with the other ranks'; one process holds it all.
  torch::Tensor reduce_norm(torch::Tensor local, bool /*is_max*/) { return local; }
};

// Policies whose multi-process path is not built yet run on one process only, and say so
// rather than train each rank on its own.
template <ParallelismPolicy Par>
struct Strategy<Par> : LocalStrategy {
  void attach(runtime::ProcessGroup* group, const Options& /*options*/) {
    if (group != nullptr)
      detail::fail("{} across {} processes is not available in this version of accel; use Ddp "
                   "(or Fsdp<NoShard>) for multi-process training, or run one process",
                   Par::name, group->size());
  }
};

}  // namespace accel::parallel
