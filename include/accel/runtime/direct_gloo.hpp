// Collectives through Gloo's registered-buffer API, run on the calling thread, beside c10d.
//
// Why not c10d's ProcessGroupGloo for everything: c10d hands each collective to a worker thread
// and moves it through Gloo's unbound buffers, where every message first goes through a
// send/receive handshake on Gloo's event-loop thread. For a small tensor those hops are the
// whole cost, and Gloo's own ring over buffers registered once is faster (docs/concepts/strategies.md,
// "Small buckets"). Large tensors move at the same speed either way,
// so they stay on c10d, whose asynchronous work overlaps backward.
//
// Gloo does all of the communicating; accel only picks which of its APIs to call.
#pragma once

#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

#include "../detail/separate_compilation.hpp"

#include "../detail/torch_compat.hpp"  // c10d::Store

namespace accel::runtime {

class DirectGloo {
 public:
  // Collective: every rank connects to every other through `store` (a key space of its own).
  ACCEL_DECL DirectGloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                        std::shared_ptr<gloo::transport::Device> device,
                        std::chrono::milliseconds timeout);

  ACCEL_DECL static bool can_register(const torch::Tensor& t);

  // A sum all-reduce of `flat` in place, its buffers registered with Gloo now; `flat` must keep
  // its storage for the algorithm's lifetime. Collective: every rank registers the same tensors
  // in the same order, since registration numbers the buffers' slots.
  ACCEL_DECL std::unique_ptr<gloo::Algorithm> ring_allreduce(torch::Tensor& flat);

 private:
  template <class T>
  std::unique_ptr<gloo::Algorithm> ring(torch::Tensor& flat) {
    // The chunked ring reduces each chunk on one rank and then copies it to the others, so every
    // rank ends with the same bytes; the plain ring (gloo::AllreduceRing) sums in a different
    // order on each rank, and three ranks' parameters would drift apart in the last bits.
    return std::make_unique<gloo::AllreduceRingChunked<T>>(
        context_, std::vector<T*>{flat.data_ptr<T>()}, static_cast<int>(flat.numel()));
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/direct_gloo.ipp"
#endif
