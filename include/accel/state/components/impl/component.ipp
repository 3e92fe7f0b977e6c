// The checkpoint components' shared helpers; component.hpp includes it in header-only mode.
#pragma once

#include <cstdint>
#include <cstring>

#include "../component.hpp"

namespace accel::state::components::detail {

ACCEL_DECL torch::Tensor bytes_tensor(const std::string& bytes) {
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

ACCEL_DECL std::string tensor_bytes(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

}  // namespace accel::state::components::detail
