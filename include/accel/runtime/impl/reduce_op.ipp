// The reductions' checks and conversions; reduce_op.hpp includes it in header-only mode.
#pragma once

#include "../reduce_op.hpp"

namespace accel::runtime {

ACCEL_DECL void check_reducible(const torch::Tensor& tensor, ReduceOp op) {
  if (op == ReduceOp::mean && !c10::isFloatingType(tensor.scalar_type()))
    accel::detail::fail("a mean over the ranks of a {} tensor would round toward zero; reduce a "
                        "floating-point tensor (tensor.to(torch::kFloat)) or use ReduceOp::sum",
                        c10::toString(tensor.scalar_type()));
}

ACCEL_DECL void check_reduce_scatter(const torch::Tensor& input, ReduceOp op, int size) {
  if (input.numel() % size != 0)
    accel::detail::fail("reduce_scatter: {} elements do not split into {} equal chunks; pad the "
                        "input to a multiple of the world size",
                        input.numel(), size);
  if (op != ReduceOp::sum && op != ReduceOp::mean)
    accel::detail::fail("reduce_scatter supports sum and mean, not max or min");
}

ACCEL_DECL shm::Reduction shm_reduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::mean: return shm::Reduction::mean;
    case ReduceOp::max: return shm::Reduction::max;
    case ReduceOp::min: return shm::Reduction::min;
    default: return shm::Reduction::sum;
  }
}

ACCEL_DECL c10d::ReduceOp c10d_reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return c10d::ReduceOp::MAX;
    case ReduceOp::min: return c10d::ReduceOp::MIN;
    default: return c10d::ReduceOp::SUM;
  }
}

}  // namespace accel::runtime
