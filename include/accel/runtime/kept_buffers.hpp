// Buffers that a collective over c10d needs for as long as it runs, kept for the next collective
// of their size.
//
// The reduce-scatter over Gloo receives every rank's chunk before summing them
// (wire_fallbacks.hpp): a buffer the size of the whole input, which under the sharded strategies
// is a unit's full gradient (tens of MB), every unit of every step. On CPU glibc maps a block
// above its mmap threshold fresh and unmaps it when freed (Zero3's threshold is 8 MiB:
// cpu_heap.hpp), so each reduce-scatter would fault its buffer in again (what that costs:
// docs/concepts/performance.md, "Two nodes over Gloo TCP"). Kept here, a buffer is lent again as
// soon as no collective holds it.
//
// It keeps what the collectives in flight at once held: a request that finds no free buffer of
// its size first lets every free buffer go. (A collective's work may still hold its buffer for a
// moment after wait() returns, on the backend's thread: a size used back to back may then get
// one buffer more, once.)
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace accel::runtime {

class KeptBuffers {
 public:
  // An uninitialized 1-D tensor of `numel` elements of `options`: a kept one no one else holds,
  // or a fresh one, kept from now on. Called from one thread (the one issuing collectives); the
  // collectives may let theirs go on any thread.
  torch::Tensor take(std::int64_t numel, const torch::TensorOptions& options) {
    for (const torch::Tensor& kept : kept_)
      if (is_free(kept) && kept.numel() == numel && kept.dtype() == options.dtype() &&
          kept.device() == options.device())
        return kept;
    std::erase_if(kept_, [](const torch::Tensor& kept) { return is_free(kept); });
    return kept_.emplace_back(torch::empty({numel}, options));
  }

  std::int64_t kept_bytes() const {
    std::int64_t bytes = 0;
    for (const torch::Tensor& kept : kept_) bytes += static_cast<std::int64_t>(kept.nbytes());
    return bytes;
  }

 private:
  // Only this list holds the memory: no tensor, view or collective's work uses it.
  static bool is_free(const torch::Tensor& kept) {
    return kept.use_count() == 1 && kept.storage().use_count() == 1;
  }

  std::vector<torch::Tensor> kept_;
};

}  // namespace accel::runtime
