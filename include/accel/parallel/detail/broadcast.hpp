// Rank 0's values of a model's tensors on every rank: how the strategies start every rank from
// the same model at prepare().
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <vector>

#include "../../detail/separate_compilation.hpp"
#include "../../runtime/process_group.hpp"

namespace accel::parallel::detail {

// Tensors of one dtype travel joined, a broadcast per batch of up to broadcast_batch_bytes rather
// than one per tensor; batched so that the joined copy and the transport's payload (two copies
// of what is sent) stay small beside the model: one broadcast of a whole model held three copies
// of it at once, the peak of a sharded strategy's whole run. Batches above
// the 32 MiB mmap threshold Options::tune_cpu_heap sets, so that their copies go back to the
// kernel when freed instead of staying in the heap. Every rank holds the same tensors, so every
// rank cuts the same batches. In place; call under torch::NoGradGuard.
inline constexpr std::int64_t broadcast_batch_bytes = std::int64_t{64} << 20;

ACCEL_DECL void broadcast_from_root(runtime::ProcessGroup& group,
                                    const std::vector<torch::Tensor>& tensors);

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/broadcast.ipp"
#endif
