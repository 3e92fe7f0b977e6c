// One process, whatever the policy: there is nothing to communicate, so every parallelism
// policy degenerates to plain local training (world size 1 is valid for each of them).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "../policy/concepts.hpp"
#include "strategy.hpp"

namespace accel::parallel {

struct LocalStrategy {
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

template <ParallelismPolicy Par>
struct Strategy<Par> : LocalStrategy {};

}  // namespace accel::parallel
