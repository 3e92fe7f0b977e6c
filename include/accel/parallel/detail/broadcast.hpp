// Rank 0's values of a model's tensors on every rank: how the strategies start every rank from
// the same model at prepare().
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <vector>

#include "../../runtime/process_group.hpp"

namespace accel::parallel::detail {

// Tensors of one dtype travel joined, a broadcast per batch of up to broadcast_batch_bytes rather
// than one per tensor; batched so that the joined copy and the transport's payload (two copies
// of what is sent) stay small beside the model: one broadcast of a whole model held three copies
// of it at once, the peak of a sharded strategy's whole run (docs/benchmarks.md). Batches above
// the 32 MiB mmap threshold Options::tune_cpu_heap sets, so that their copies go back to the
// kernel when freed instead of staying in the heap. Every rank holds the same tensors, so every
// rank cuts the same batches. In place; call under torch::NoGradGuard.
inline constexpr std::int64_t broadcast_batch_bytes = std::int64_t{64} << 20;

inline void broadcast_from_root(runtime::ProcessGroup& group,
                                const std::vector<torch::Tensor>& tensors) {
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  const auto send = [&](std::vector<torch::Tensor>& batch) {
    if (batch.empty()) return;
    std::vector<torch::Tensor> flat;
    for (const auto& t : batch) flat.push_back(t.detach().reshape(-1));
    torch::Tensor joined = torch::cat(flat);
    flat.clear();
    group.broadcast(joined, 0);
    std::int64_t offset = 0;
    for (auto& t : batch) {
      t.detach().copy_(joined.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
    batch.clear();
  };
  for (auto& [dtype, same] : by_dtype) {
    std::vector<torch::Tensor> batch;
    std::int64_t bytes = 0;
    for (const auto& t : same) {
      const std::int64_t size = t.numel() * static_cast<std::int64_t>(t.element_size());
      if (!batch.empty() && bytes + size > broadcast_batch_bytes) {
        send(batch);
        bytes = 0;
      }
      batch.push_back(t);
      bytes += size;
    }
    send(batch);
  }
}

}  // namespace accel::parallel::detail
