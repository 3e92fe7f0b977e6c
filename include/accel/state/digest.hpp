// A digest of a module's parameters: FNV-1a over every parameter's name, shape and bytes, in
// registration order. Equal digests mean bitwise-equal parameters; comparing them across ranks
// or runs is cheaper and stricter than comparing losses.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace accel::state {

inline std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t hash) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

inline std::uint64_t parameter_digest(const torch::nn::Module& module) {
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

inline std::string parameter_digest_hex(const torch::nn::Module& module) {
  return fmt::format("{:016x}", parameter_digest(module));
}

}  // namespace accel::state
