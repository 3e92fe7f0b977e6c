// The broadcast's layout header; tensor_layout.hpp includes it in header-only mode.
#pragma once

#include <fmt/ranges.h>

#include "../../detail/error.hpp"
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

ACCEL_DECL void land_broadcast(const torch::Tensor& payload, const torch::Tensor& header,
                               torch::Tensor& tensor, int root, int rank, std::uint64_t sequence) {
  const torch::Tensor received = payload.narrow(0, 0, header.numel() * 8).view(torch::kLong);
  if (!torch::equal(received, header))
    accel::detail::fail("broadcast #{} from rank {}: the root sent {} and rank {} passed {}; every "
                        "rank must pass a tensor of the root's dtype and shape",
                        sequence, root, layout_text(received), rank, layout_text(header));
  torch::Tensor body = payload.narrow(0, header.numel() * 8, payload.numel() - header.numel() * 8);
  if (tensor.numel() > 0)
    tensor.view(-1).copy_(body.view(tensor.scalar_type()).view(-1));
}

}  // namespace accel::runtime
