// The collectives' tensor helpers; collectives.hpp includes it in header-only mode.
#pragma once

#include <fmt/ranges.h>

#include "../collectives.hpp"

namespace accel::runtime {

ACCEL_DECL torch::Tensor pad_tensor(ProcessGroup* group, const torch::Tensor& t, std::int64_t dim,
                                    double pad_value, bool pad_first, std::int64_t target) {
  if (group == nullptr || t.dim() == 0) return t;
  if (dim < 0) dim += t.dim();
  if (dim < 0 || dim >= t.dim())
    accel::detail::fail("pad_across_processes: dim {} is out of range for a tensor of {} "
                        "dimensions",
                        dim, t.dim());
  if (target < 0) {
    torch::Tensor size = accel::detail::one_value(t.size(dim));
    group->allreduce(size, ReduceOp::max);
    target = size.item<std::int64_t>();
  }
  if (t.size(dim) == target) return t;
  std::vector<std::int64_t> shape = t.sizes().vec();
  shape[static_cast<std::size_t>(dim)] = target;
  torch::Tensor padded = torch::full(shape, pad_value, t.options());
  const std::int64_t offset = pad_first ? target - t.size(dim) : 0;
  padded.narrow(dim, offset, t.size(dim)).copy_(t);
  return padded;
}

ACCEL_DECL torch::Tensor gather_tensor(ProcessGroup* group, const torch::Tensor& tensor,
                                       int every) {
  const torch::Tensor t = tensor.dim() == 0 ? tensor.reshape({1}) : tensor;
  if (group == nullptr) return t;
  // Rows, dtype and the shape past the first dimension (up to 6 dimensions in all), in the one
  // small all-gather the rows need anyway: a mismatch fails here, naming each rank's, rather
  // than inside Gloo.
  std::vector<std::int64_t> layout(8, 0);
  layout[0] = t.size(0);
  layout[1] = static_cast<std::int64_t>(t.scalar_type());
  layout[2] = t.dim();
  for (std::int64_t d = 1; d < std::min<std::int64_t>(t.dim(), 6); ++d)
    layout[static_cast<std::size_t>(2 + d)] = t.size(d);
  const torch::Tensor layouts =
      group->allgather(accel::detail::values_tensor(layout)).view({-1, 8});
  const torch::Tensor rest = layouts.narrow(1, 1, 7);
  if (!torch::equal(rest, rest[0].expand_as(rest))) {
    std::string each;
    for (int r = 0; r < group->size(); ++r) {
      const std::int64_t* v = layouts[r].data_ptr<std::int64_t>();
      each += fmt::format("\n  rank {}: {} tensor of shape [rows, {}]", r,
                          c10::toString(static_cast<c10::ScalarType>(v[1])),
                          fmt::join(v + 3, v + 2 + std::min<std::int64_t>(v[2], 6), ", "));
    }
    accel::detail::fail("gather: the ranks passed tensors that differ in dtype or past the first "
                        "dimension; only the first dimension may differ:{}",
                        each);
  }
  const torch::Tensor rows = layouts.select(1, 0).contiguous();
  const std::int64_t longest = rows.max().item<std::int64_t>();
  const bool even = rows.min().item<std::int64_t>() == longest;
  if (even && every <= 1) return group->allgather(t);
  // Uneven first dimensions: pad to the longest, gather, then keep each rank's real rows (of
  // every `every`-th rank).
  const torch::Tensor all =
      group->allgather(even ? t : pad_tensor(group, t, 0, 0.0, false, longest));
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < group->size(); r += std::max(every, 1))
    parts.push_back(all.narrow(0, r * longest, rows[r].item<std::int64_t>()));
  return torch::cat(parts);
}

}  // namespace accel::runtime
