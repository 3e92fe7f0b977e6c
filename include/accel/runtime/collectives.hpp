// The collectives the Accelerator offers over any aggregate of tensors (data/tensor_tree.hpp),
// as free functions of a process group. Every rank calls them, in the same order. With no group
// (one process) each returns its argument (gather: as if gathered from one rank).
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../data/tensor_tree.hpp"
#include "../detail/bytes.hpp"
#include "../detail/error.hpp"
#include "../detail/small_tensor.hpp"
#include "process_group.hpp"

namespace accel::runtime {

// Every tensor of `value` as rank `root` holds it.
template <class T>
T broadcast(ProcessGroup* group, const T& value, int root = 0) {
  if (group == nullptr) return value;
  return data::map_tensors(value, [&](const torch::Tensor& t) {
    torch::Tensor copy = t.detach().clone();
    group->broadcast(copy, root);
    return copy;
  });
}

// Every tensor of `value` reduced element-wise over the ranks.
template <class T>
T reduce(ProcessGroup* group, const T& value, ReduceOp op = ReduceOp::sum) {
  data::for_each_tensor(value, [&](const torch::Tensor& t) { check_reducible(t, op); });
  if (group == nullptr) return value;
  return data::map_tensors(value, [&](const torch::Tensor& t) {
    torch::Tensor copy = t.detach().clone();
    group->allreduce(copy, op);
    return copy;
  });
}

// Dimension `dim` of `t` padded with `pad_value` to `target`, or to the largest size among the
// ranks when target < 0.
inline torch::Tensor pad_tensor(ProcessGroup* group, const torch::Tensor& t, std::int64_t dim,
                                double pad_value, bool pad_first, std::int64_t target = -1) {
  if (group == nullptr || t.dim() == 0) return t;
  if (dim < 0) dim += t.dim();
  if (dim < 0 || dim >= t.dim())
    detail::fail("pad_across_processes: dim {} is out of range for a tensor of {} dimensions", dim,
                 t.dim());
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

template <class T>
T pad_across_processes(ProcessGroup* group, const T& value, std::int64_t dim = 0,
                       double pad_value = 0.0, bool pad_first = false) {
  return data::map_tensors(value, [&](const torch::Tensor& t) {
    return pad_tensor(group, t, dim, pad_value, pad_first);
  });
}

// Every rank's `tensor` concatenated along dimension 0 in rank order; the first dimension may
// differ between ranks, 0-dim tensors become one row per rank.
inline torch::Tensor gather_tensor(ProcessGroup* group, const torch::Tensor& tensor) {
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
    detail::fail("gather: the ranks passed tensors that differ in dtype or past the first "
                 "dimension; only the first dimension may differ:{}",
                 each);
  }
  const torch::Tensor rows = layouts.select(1, 0).contiguous();
  const std::int64_t longest = rows.max().item<std::int64_t>();
  if (rows.min().item<std::int64_t>() == longest) return group->allgather(t);
  // Uneven first dimensions: pad to the longest, gather, then keep each rank's real rows.
  const torch::Tensor all = group->allgather(pad_tensor(group, t, 0, 0.0, false, longest));
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < group->size(); ++r)
    parts.push_back(all.narrow(0, r * longest, rows[r].item<std::int64_t>()));
  return torch::cat(parts);
}

template <class T>
T gather(ProcessGroup* group, const T& value) {
  return data::map_tensors(value,
                           [&](const torch::Tensor& t) { return gather_tensor(group, t); });
}

// gather, keeping only the first `keep` rows of each gathered tensor (keep < 0: all of them).
template <class T>
T gather_first(ProcessGroup* group, const T& value, std::int64_t keep) {
  return data::map_tensors(value, [&](const torch::Tensor& t) {
    torch::Tensor all = gather_tensor(group, t);
    return keep >= 0 && keep < all.size(0) ? all.narrow(0, 0, keep) : all;
  });
}

// One value per rank, in rank order. T: a trivially copyable type, std::string, or a
// std::vector of a trivially copyable type.
template <class T>
std::vector<T> gather_object(ProcessGroup* group, const T& value) {
  if (group == nullptr) return {value};
  std::vector<T> result;
  for (const std::string& bytes : group->allgather_bytes(detail::to_bytes(value)))
    result.push_back(detail::from_bytes<T>(bytes));
  return result;
}

}  // namespace accel::runtime
