// parameter_digest(); digest.hpp includes it in header-only mode.
#pragma once

#include "../digest.hpp"

namespace accel::state {

ACCEL_DECL std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t hash) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

ACCEL_DECL std::uint64_t parameter_digest(const torch::nn::Module& module) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const auto& item : module.named_parameters()) {
    hash = fnv1a(item.key().data(), item.key().size(), hash);
    const torch::Tensor value = item.value().detach().to(torch::kCPU).contiguous();
    const auto sizes = value.sizes();
    hash = fnv1a(sizes.data(), sizes.size() * sizeof(std::int64_t), hash);
    hash = fnv1a(value.data_ptr(), value.numel() * value.element_size(), hash);
  }
  return hash;
}

}  // namespace accel::state
