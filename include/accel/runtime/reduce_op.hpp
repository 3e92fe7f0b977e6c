// The reductions accel's collectives offer (ReduceOp), which of them a tensor or a collective
// allows, and what each one is called on the transports that carry it (c10d's ReduceOp, the
// shared-memory transport's Reduction). Gloo has no mean: the group divides a sum.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "../detail/error.hpp"
#include "../detail/torch_compat.hpp"
#include "shm/elements.hpp"

namespace accel::runtime {

enum class ReduceOp { sum, mean, max, min };

// A mean of integers would round toward zero: refused, on one process as on several.
inline void check_reducible(const torch::Tensor& tensor, ReduceOp op) {
  if (op == ReduceOp::mean && !c10::isFloatingType(tensor.scalar_type()))
    detail::fail("a mean over the ranks of a {} tensor would round toward zero; reduce a "
                 "floating-point tensor (tensor.to(torch::kFloat)) or use ReduceOp::sum",
                 c10::toString(tensor.scalar_type()));
}

// A reduce-scatter splits `input` into `size` equal chunks, and sums or averages them.
inline void check_reduce_scatter(const torch::Tensor& input, ReduceOp op, int size) {
  if (input.numel() % size != 0)
    detail::fail("reduce_scatter: {} elements do not split into {} equal chunks; pad the input "
                 "to a multiple of the world size",
                 input.numel(), size);
  if (op != ReduceOp::sum && op != ReduceOp::mean)
    detail::fail("reduce_scatter supports sum and mean, not max or min");
}

// The shared-memory transport averages itself.
inline shm::Reduction shm_reduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::mean: return shm::Reduction::mean;
    case ReduceOp::max: return shm::Reduction::max;
    case ReduceOp::min: return shm::Reduction::min;
    default: return shm::Reduction::sum;
  }
}

// A mean goes to c10d as a sum: the group divides by the world size afterwards.
inline c10d::ReduceOp c10d_reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return c10d::ReduceOp::MAX;
    case ReduceOp::min: return c10d::ReduceOp::MIN;
    default: return c10d::ReduceOp::SUM;
  }
}

}  // namespace accel::runtime
