// Rank 0's values of a model's tensors on every rank: how the strategies start every rank from
// the same model at prepare().
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <vector>

#include "../../runtime/process_group.hpp"

namespace accel::parallel::detail {

// One broadcast per dtype, not one per tensor. In place; call under torch::NoGradGuard.
inline void broadcast_from_root(runtime::ProcessGroup& group,
                                const std::vector<torch::Tensor>& tensors) {
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, same] : by_dtype) {
    std::vector<torch::Tensor> flat;
    for (const auto& t : same) flat.push_back(t.detach().reshape(-1));
    torch::Tensor joined = torch::cat(flat);
    group.broadcast(joined, 0);
    std::int64_t offset = 0;
    for (auto& t : same) {
      t.detach().copy_(joined.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

}  // namespace accel::parallel::detail
