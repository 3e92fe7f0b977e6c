// The reductions accel's collectives offer (ReduceOp), which of them a tensor or a collective
// allows, and what each one is called on the transports that carry it (c10d's ReduceOp, the
// shared-memory transport's Reduction). Gloo has no mean: the group divides a sum.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "shm/elements.hpp"

namespace accel::runtime {

enum class ReduceOp { sum, mean, max, min };

// A mean of integers would round toward zero: refused, on one process as on several.
ACCEL_DECL void check_reducible(const torch::Tensor& tensor, ReduceOp op);

// A reduce-scatter splits `input` into `size` equal chunks, and sums or averages them.
ACCEL_DECL void check_reduce_scatter(const torch::Tensor& input, ReduceOp op, int size);

// The shared-memory transport averages itself.
ACCEL_DECL shm::Reduction shm_reduction(ReduceOp op);

// A mean goes to c10d as a sum: the group divides by the world size afterwards.
ACCEL_DECL c10d::ReduceOp c10d_reduce_op(ReduceOp op);

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/reduce_op.ipp"
#endif
