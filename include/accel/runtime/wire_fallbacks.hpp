// What a c10d backend lacks, filled here once for every strategy (docs/concepts/distributed.md, "Filling
// the gaps of a backend, once"; the gaps themselves are in detail/torch_compat.hpp):
//   - bf16 on the wire through an fp32 copy where Gloo lacks bf16 (libtorch 1.13), cast back;
//   - all-gather into one flat tensor as a list all-gather plus a concatenation;
//   - reduce-scatter as alltoall plus a local sum: each rank sends and receives (N-1)/N of the
//     data, like a ring (PyTorch's own fallback, allreduce then slice, moves twice that).
// NCCL has every op and dtype accel uses; C10dTransport (c10d_transport.hpp) takes the native op
// where the backend has it and these where it does not. Over Gloo it starts the all-gather into
// a flat buffer and the reduce-scatter of a chunk up to fallback_piece itself, as broadcasts and
// one alltoall (C10dTransport::begin_allgather_into): these below are then its blocking
// fallbacks for bf16 on 1.13 and larger gradients, and what the test transport runs
// (fallback_transport.hpp).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../detail/torch_compat.hpp"

namespace accel::runtime {

// NCCL carries every dtype accel reduces; Gloo lacks bf16 before 2.x.
inline bool wire_native(const torch::Tensor& t) {
  return t.is_cuda() || t.scalar_type() != torch::kBFloat16 || detail::gloo_has_bf16;
}
inline bool has_allgather_base(const torch::Tensor& t) {
  return t.is_cuda() || detail::gloo_has_allgather_base;
}

inline torch::Tensor to_wire(const torch::Tensor& t) {
  return wire_native(t) ? t : t.to(torch::kFloat);
}

// Runs a collective on `tensor`, through an fp32 copy where the wire lacks its dtype.
template <class Collective>
void on_wire(torch::Tensor& tensor, Collective&& collective) {
  if (wire_native(tensor) && tensor.is_contiguous()) {
    collective(tensor);
    return;
  }
  torch::Tensor wire = to_wire(tensor).contiguous();
  collective(wire);
  tensor.copy_(wire);
}

// Elements per rank that the reduce-scatter and all-gather fallbacks move at once (16 MiB of
// fp32): their temporary buffers are size() times this, not size() times the whole input.
inline constexpr std::int64_t fallback_piece = std::int64_t{4} << 20;

// The fallbacks below run on `backend` among `size` ranks and wait for each piece of work
// through `await(work)`, the transport's own waiting (C10dTransport::await): watched for stuck
// ranks, a failure named as the collective.

// Every rank's `input` (contiguous, at least 1-D), concatenated along dimension 0 in rank order:
// a list all-gather, then one concatenation.
template <class Await>
torch::Tensor allgather_by_list(detail::CommBackend& backend, int size, const torch::Tensor& input,
                                Await&& await) {
  std::vector<torch::Tensor> inputs{to_wire(input)};
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < size; ++r) outputs[0].push_back(torch::empty_like(inputs[0]));
  await(backend.allgather(outputs, inputs));
  return torch::cat(outputs[0], 0).to(input.scalar_type());
}

// Every rank's `input` written into `flat_output` (size x input's elements, rank order).
// Gloo's list all-gather gathers into a buffer of its own and then copies each rank's part
// into the list's tensors, which here are views of `flat_output`. Piece by piece, so that its
// buffer stays small (fallback_piece) whatever the size of a flat parameter.
template <class Await>
void allgather_into_by_list(detail::CommBackend& backend, int size, torch::Tensor& flat_output,
                            const torch::Tensor& input, Await&& await) {
  const torch::Tensor whole = to_wire(input.reshape(-1));
  const bool same_dtype = wire_native(input);
  const std::int64_t n = input.numel();
  for (std::int64_t begin = 0; begin < n; begin += fallback_piece) {
    const std::int64_t length = std::min(fallback_piece, n - begin);
    std::vector<torch::Tensor> inputs{whole.narrow(0, begin, length)};
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int r = 0; r < size; ++r)
      outputs[0].push_back(same_dtype ? flat_output.narrow(0, r * n + begin, length)
                                      : torch::empty_like(inputs[0]));
    await(backend.allgather(outputs, inputs));
    if (!same_dtype)
      for (int r = 0; r < size; ++r)
        flat_output.narrow(0, r * n + begin, length).copy_(outputs[0][r]);
  }
}

// This rank's chunk of `flat` (size equal chunks), summed over the ranks. alltoall: chunk j
// goes to rank j, so rank r receives every rank's chunk r; summing them locally finishes the
// reduce-scatter. In fp32 where the wire lacks bf16. Piece by piece (the same part of every
// chunk at a time), so that what is sent and received at once stays small (fallback_piece per
// rank) whatever the size of a flat gradient.
template <class Await>
torch::Tensor reduce_scatter_by_alltoall(detail::CommBackend& backend, int size,
                                         const torch::Tensor& flat, Await&& await) {
  const std::int64_t chunk = flat.numel() / size;
  const torch::Tensor chunks = flat.view({size, chunk});
  torch::Tensor result = torch::empty({chunk}, flat.options());
  std::vector<std::int64_t> equal_split;
  for (std::int64_t begin = 0; begin < chunk; begin += fallback_piece) {
    const std::int64_t length = std::min(fallback_piece, chunk - begin);
    torch::Tensor wire = to_wire(chunks.narrow(1, begin, length).contiguous());
    torch::Tensor received = torch::empty_like(wire);
    await(backend.alltoall_base(received, wire, equal_split, equal_split));
    result.narrow(0, begin, length).copy_(received.view({size, length}).sum(0));
  }
  return result;
}

}  // namespace accel::runtime
