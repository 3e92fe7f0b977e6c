// assign_buckets(); bucket_assignment.hpp includes it in header-only mode.
#pragma once

#include "../bucket_assignment.hpp"

namespace accel::parallel::detail {

ACCEL_DECL std::vector<std::vector<std::size_t>> assign_buckets(
    const std::vector<torch::Tensor>& parameters, BucketCaps caps) {
  struct Open {
    c10::ScalarType dtype;
    torch::Device device;
    std::size_t bucket;  // index into buckets, or npos while closed
    std::int64_t bytes;
    bool first;
  };
  constexpr std::size_t closed = static_cast<std::size_t>(-1);
  std::vector<std::vector<std::size_t>> buckets;
  std::vector<Open> open;  // one per (dtype, device); a handful at most
  for (std::size_t k = parameters.size(); k-- > 0;) {
    const torch::Tensor& p = parameters[k];
    if (!p.requires_grad()) continue;
    Open* slot = nullptr;
    for (auto& candidate : open)
      if (candidate.dtype == p.scalar_type() && candidate.device == p.device()) slot = &candidate;
    if (slot == nullptr) slot = &open.emplace_back(Open{p.scalar_type(), p.device(), closed, 0, true});
    if (slot->bucket == closed) {
      slot->bucket = buckets.size();
      slot->bytes = 0;
      buckets.emplace_back();
    }
    buckets[slot->bucket].push_back(k);
    slot->bytes += p.numel() * p.element_size();
    const double cap = slot->first ? caps.first_mb : caps.rest_mb;
    if (static_cast<double>(slot->bytes) >= cap * 1048576.0) {
      slot->bucket = closed;
      slot->first = false;
    }
  }
  return buckets;
}

}  // namespace accel::parallel::detail
