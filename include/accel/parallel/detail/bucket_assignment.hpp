// Which gradients travel together: PyTorch's bucket assignment, as a free function the Reducer
// receives its plan from (and a unit test checks without any process group).
//
// Parameters are taken in reverse registration order, roughly the order backward produces their
// gradients. Each (dtype, device) has its own open bucket, since a bucket is one flat tensor.
// A bucket closes once it holds at least its cap, as PyTorch's buckets do: the first one then
// ends with the first large gradient backward produces, so a sizeable all-reduce starts while
// most of backward is still ahead. The first bucket of each dtype has the smaller first cap.
// Parameters that do not require a gradient are in no bucket.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace accel::parallel::detail {

struct BucketCaps {
  double first_mb = 1.0;
  double rest_mb = 25.0;
};

// Buckets of parameter indices, in the order their all-reduces start.
inline std::vector<std::vector<std::size_t>> assign_buckets(
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
