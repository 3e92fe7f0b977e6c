// broadcast_from_root(); broadcast.hpp includes it in header-only mode.
#pragma once

#include "../broadcast.hpp"

namespace accel::parallel::detail {

ACCEL_DECL void broadcast_from_root(runtime::ProcessGroup& group,
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
