// The collectives the Accelerator offers over any aggregate of tensors (data/tensor_tree.hpp),
// as free functions of a process group. Every rank calls them, in the same order. With no group
// (one process) each returns its argument (gather: as if gathered from one rank).
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../data/tensor_tree.hpp"
#include "../detail/bytes.hpp"
#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
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
ACCEL_DECL torch::Tensor pad_tensor(ProcessGroup* group, const torch::Tensor& t, std::int64_t dim,
                                    double pad_value, bool pad_first, std::int64_t target = -1);

template <class T>
T pad_across_processes(ProcessGroup* group, const T& value, std::int64_t dim = 0,
                       double pad_value = 0.0, bool pad_first = false) {
  return data::map_tensors(value, [&](const torch::Tensor& t) {
    return pad_tensor(group, t, dim, pad_value, pad_first);
  });
}

// Every rank's `tensor` concatenated along dimension 0 in rank order; the first dimension may
// differ between ranks, 0-dim tensors become one row per rank. With `every` > 1 only the ranks
// 0, every, 2 x every, ... contribute (the first rank of each tensor-parallel group, whose
// other ranks hold the same values): each group's rows once, in group order.
ACCEL_DECL torch::Tensor gather_tensor(ProcessGroup* group, const torch::Tensor& tensor,
                                       int every = 1);

template <class T>
T gather(ProcessGroup* group, const T& value) {
  return data::map_tensors(value,
                           [&](const torch::Tensor& t) { return gather_tensor(group, t); });
}

// gather, keeping only the first `keep` rows of each gathered tensor (keep < 0: all of them);
// `every` as gather_tensor's.
template <class T>
T gather_first(ProcessGroup* group, const T& value, std::int64_t keep, int every = 1) {
  return data::map_tensors(value, [&](const torch::Tensor& t) {
    torch::Tensor all = gather_tensor(group, t, every);
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

// This rank's contiguous share of `items` (a std::vector or a tensor's first dimension): shares
// differ by at most one item, the first ranks taking the extra ones. No communication: every
// rank computes its own share from the same items.
template <class T>
T split_between_processes(ProcessGroup* group, const T& items) {
  const std::int64_t n = static_cast<std::int64_t>([&] {
    if constexpr (std::is_same_v<T, torch::Tensor>)
      return items.size(0);
    else
      return items.size();
  }());
  const std::int64_t world = group != nullptr ? group->size() : 1;
  const std::int64_t rank = group != nullptr ? group->rank() : 0;
  const std::int64_t base = n / world, extra = n % world;
  const std::int64_t begin = rank * base + std::min(rank, extra);
  const std::int64_t count = base + (rank < extra ? 1 : 0);
  if constexpr (std::is_same_v<T, torch::Tensor>)
    return items.narrow(0, begin, count);
  else
    return T(items.begin() + begin, items.begin() + begin + count);
}

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/collectives.ipp"
#endif
