// The broadcast's layout header; tensor_layout.hpp includes it in header-only mode.
#pragma once

#include <fmt/ranges.h>

#include "../tensor_layout.hpp"

namespace accel::runtime {

ACCEL_DECL torch::Tensor describe_layout(const torch::Tensor& t) {
  std::vector<std::int64_t> layout(10, 1);
  layout[0] = static_cast<std::int64_t>(t.scalar_type());
  layout[1] = t.dim();
  for (std::int64_t d = 0; d < t.dim(); ++d) layout[static_cast<std::size_t>(2 + std::min<std::int64_t>(d, 7))] *= t.size(d);
  return accel::detail::values_tensor(layout);
}

ACCEL_DECL std::string layout_text(const torch::Tensor& layout) {
  const auto dims = std::min<std::int64_t>(layout[1].item<std::int64_t>(), 8);
  std::vector<std::int64_t> shape;
  for (std::int64_t d = 0; d < dims; ++d) shape.push_back(layout[2 + d].item<std::int64_t>());
  const auto dtype = layout[0].item<std::int64_t>();
  const bool known = dtype >= 0 && dtype < static_cast<std::int64_t>(c10::ScalarType::NumOptions);
  return fmt::format("a {} tensor of shape [{}]",
                     known ? c10::toString(static_cast<c10::ScalarType>(dtype)) : "?",
                     fmt::join(shape, ", "));
}

ACCEL_DECL torch::Tensor layout_then_bytes(const torch::Tensor& header, const torch::Tensor& data,
                                           bool with_data) {
  torch::Tensor payload = torch::empty({header.numel() * 8 + data.numel() * data.element_size()},
                                       torch::kUInt8);
  std::memcpy(payload.data_ptr(), header.data_ptr(), static_cast<std::size_t>(header.numel() * 8));
  if (with_data)
    std::memcpy(payload.data_ptr<std::uint8_t>() + header.numel() * 8, data.data_ptr(),
                static_cast<std::size_t>(data.numel() * data.element_size()));
  return payload;
}

}  // namespace accel::runtime
