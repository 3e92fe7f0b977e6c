// A tensor's dtype and shape as int64s, which a broadcast sends with its data (CPU) or ahead of
// it (CUDA, over Gloo), so that a rank that passed a tensor of the same byte size but another
// dtype or shape fails naming both layouts instead of reading garbage; the text that names one
// ("a Float tensor of shape [2, 3]"); and the CPU broadcast's payload, layout then bytes, which
// every transport's broadcast sends (broadcast_with_layout).
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "../detail/small_tensor.hpp"

namespace accel::runtime {

// [dtype, ndim, d0..d7] (dimensions past the eighth folded into the eighth).
ACCEL_DECL torch::Tensor describe_layout(const torch::Tensor& t);

ACCEL_DECL std::string layout_text(const torch::Tensor& layout);

// What a CPU broadcast sends: `header` (describe_layout()) and room for `data`'s bytes, which
// only the root (`with_data`) fills in.
ACCEL_DECL torch::Tensor layout_then_bytes(const torch::Tensor& header, const torch::Tensor& data,
                                           bool with_data);

// The receiving side of broadcast_with_layout: fails naming both layouts where they differ.
ACCEL_DECL void land_broadcast(const torch::Tensor& payload, const torch::Tensor& header,
                               torch::Tensor& tensor, int root, int rank, std::uint64_t sequence);

// A CPU broadcast of `tensor` from `root`, collective #`sequence`, through `send` (a transport's
// broadcast of one contiguous tensor's bytes): the root's layout and bytes travel together (no
// extra round trip), and every other rank compares the layout with its own before copying.
template <class Send>
void broadcast_with_layout(torch::Tensor& tensor, int root, int rank, std::uint64_t sequence,
                           Send&& send) {
  const torch::Tensor header = describe_layout(tensor);
  torch::Tensor payload = layout_then_bytes(header, tensor.contiguous(), rank == root);
  send(payload);
  if (rank != root) land_broadcast(payload, header, tensor, root, rank, sequence);
}

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/tensor_layout.ipp"
#endif
