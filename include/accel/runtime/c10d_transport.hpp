// A process group's ranks connected through c10d: Gloo for CPU tensors, NCCL for CUDA tensors
// where the ranks train on CUDA (nccl.hpp), Gloo's registered buffers for small all-reduces
// (direct_gloo.hpp), and the stuck-collective watch over them (stuck_collective.hpp). Each
// collective takes the backend's native op where it has one and the fallback where it does not
// (wire_fallbacks.hpp), and over Gloo the all-gather into a flat buffer and the reduce-scatter
// take ops that write straight into accel's buffers (begin_allgather_into); waiting on the work
// and naming its failures is here too, and so is the teardown through the store that records
// which ranks have left the group. Which transport carries a collective is the group's choice
// (process_group.hpp); what every transport offers, transport.hpp.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "c10d_started.hpp"
#include "collective_call.hpp"
#include "direct_gloo.hpp"
#include "error_line.hpp"
#include "failure_record.hpp"
#include "group_settings.hpp"
#include "kept_buffers.hpp"
#include "nccl.hpp"
#include "pending_collective.hpp"
#include "reduce_op.hpp"
#include "store_text.hpp"
#include "stuck_collective.hpp"
#include "tensor_layout.hpp"
#include "transport.hpp"
#include "wire_fallbacks.hpp"

namespace accel::runtime {

// Gloo's device between nodes: the interface GLOO_SOCKET_IFNAME names (as in PyTorch), else
// the one this host name resolves to.
ACCEL_DECL std::shared_ptr<::gloo::transport::Device> gloo_device_for_nodes();

class C10dTransport {
 public:
  // Collective: Gloo's connections (and NCCL's group, made at its first collective) between
  // the `size` ranks on `store`, the group's own key space. `same_host`: keep Gloo on loopback.
  // `watch_stuck`: run the stuck-collective watch (a group whose CPU tensors go through shared
  // memory does not need it: that transport compares every call).
  ACCEL_DECL C10dTransport(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                           bool same_host, const GroupSettings& settings, bool watch_stuck);

  C10dTransport(const C10dTransport&) = delete;
  C10dTransport& operator=(const C10dTransport&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The group's key space: its subgroups, its shared-memory segment's name and its collective
  // checks keep their keys here.
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  // A collective of this group failed: teardown skips its wait.
  bool broken() const { return broken_; }

  // The backend that carries `t`: NCCL for a CUDA tensor, Gloo for the rest.
  ACCEL_DECL detail::CommBackend& backend_for(const torch::Tensor& t);

  // Waits for `work`, watched for ranks stuck in other collectives; a failure names `call`.
  ACCEL_DECL void await(const c10::intrusive_ptr<c10d::Work>& work, const CollectiveCall& call);

  // A sum all-reduce of `flat` in place over buffers registered with Gloo now (direct_gloo.hpp),
  // on its own key space and connections, made at the first one: c10d's never see these
  // messages. Collective, as registering is; `flat` must keep its storage while the ring lives.
  ACCEL_DECL std::unique_ptr<gloo::Algorithm> register_ring(torch::Tensor& flat);
  // Runs a registered ring on the calling thread, watched as await() watches.
  ACCEL_DECL void run(gloo::Algorithm& ring, const CollectiveCall& call);

  // A collective failed (a timeout, a peer gone): the error names it, what the peers were doing
  // as far as the store knows, and the timeout. The group is then broken: teardown skips its
  // wait.
  [[noreturn]] ACCEL_DECL void failed(const CollectiveCall& call, const std::exception& error);
  // "; rank 2 has left the group after issuing 4 collectives" for each peer that has left (its
  // teardown wrote how many it issued), or that the store is unreachable; empty when none.
  ACCEL_DECL std::string left_peers() const noexcept;

  // The collectives (transport.hpp). `call` (numbered by the group) names a failure. c10d
  // carries every collective on any tensor; it starts an all-reduce where the wire carries the
  // dtype, and an all-gather or a reduce-scatter where begin_allgather_into or
  // begin_reduce_scatter (below) take the tensor; otherwise the blocking calls run a fallback
  // of several steps (wire_fallbacks.hpp).
  bool carries(CollectiveOp, const torch::Tensor&) const { return true; }
  ACCEL_DECL bool starts(CollectiveOp op, const torch::Tensor& t) const;

  void barrier(const CollectiveCall& call) { await(gloo_->barrier(), call); }
  // In place; mean divides the sum by the world size (Gloo has no AVG).
  ACCEL_DECL void allreduce(torch::Tensor& tensor, ReduceOp op, const CollectiveCall& call);
  // A CPU tensor: its layout and bytes in one broadcast (broadcast_with_layout). A CUDA tensor:
  // the root's layout over Gloo (a CPU tensor, checked as on the CPU path), then the data over
  // NCCL straight into the tensor (or a contiguous stand-in).
  ACCEL_DECL void broadcast(torch::Tensor& tensor, int root, const CollectiveCall& call);
  // Every rank's `input` (contiguous, at least 1-D), concatenated along dimension 0 in rank order.
  ACCEL_DECL torch::Tensor allgather(const torch::Tensor& input, const CollectiveCall& call);
  // Every rank's `input` written into `output` (size() x input's elements, rank order).
  ACCEL_DECL void allgather_into(torch::Tensor& output, const torch::Tensor& input,
                                 const CollectiveCall& call);
  // This rank's chunk of `flat` (size() equal chunks), summed over the ranks, or averaged.
  ACCEL_DECL torch::Tensor reduce_scatter(const torch::Tensor& flat, ReduceOp op,
                                          const CollectiveCall& call);
  // Started as c10d's work where starts() says so; the pending collective's wait() awaits it.
  ACCEL_DECL PendingCollective start_allreduce(const torch::Tensor& sent,
                                               const CollectiveCall& call);
  ACCEL_DECL PendingCollective start_allgather_into(torch::Tensor& output,
                                                    const torch::Tensor& input,
                                                    const CollectiveCall& call);
  // Into a chunk of its own whatever `into` is: `into` may be this rank's slice of the input,
  // which the backend reads while it writes.
  ACCEL_DECL PendingCollective start_reduce_scatter(const torch::Tensor& input, torch::Tensor& into,
                                                    ReduceOp op, const CollectiveCall& call);
  // Waits for every work of `started`, watched as the await() above, then finishes it.
  ACCEL_DECL void await(C10dStarted& started, const CollectiveCall& call);

  // The fallbacks alone (wire_fallbacks.hpp), whatever the backend has: what the blocking
  // collectives above take where it lacks the native op, and what the test transport runs
  // (fallback_transport.hpp).
  torch::Tensor allgather_by_list(const torch::Tensor& input, const CollectiveCall& call) {
    return runtime::allgather_by_list(backend_for(input), size_, input, Waiter{this, &call});
  }
  void allgather_into_by_list(torch::Tensor& flat_output, const torch::Tensor& input,
                              const CollectiveCall& call) {
    runtime::allgather_into_by_list(backend_for(input), size_, flat_output, input,
                                    Waiter{this, &call});
  }
  ACCEL_DECL torch::Tensor reduce_scatter_by_alltoall(const torch::Tensor& flat, ReduceOp op,
                                                      const CollectiveCall& call);

  // Leaving the group, after `issued` collectives. Gloo fails a peer's pending receive when this
  // side closes its connections, so a rank that finished first waits, briefly, for the others
  // to reach here too (through the store, not Gloo): long enough for the last collective's final
  // bytes to arrive everywhere, short enough that peers stuck in a collective this rank never
  // joins learn of it within seconds (closing the connections fails their collective at once).
  // `failing` (an exception unwinds through the group's owner, or a collective failed: the group
  // is broken then anyway): no wait at all. (An error the program caught still waits: its peers
  // may be finishing the last collective, as when every rank raised the same error.)
  // `announced` runs once this rank's count is in the store, before the wait: the shared-memory
  // path leaves there (SharedMemoryPath::leave), so that its peers' errors can name the count.
  ACCEL_DECL void leave(std::uint64_t issued, bool failing,
                        const std::function<void()>& announced = {}) noexcept;
  static constexpr std::chrono::milliseconds teardown_wait = std::chrono::seconds(3);

 private:
  // Whether begin_allgather_into and begin_reduce_scatter below take `t`: the wire carries its
  // dtype and, for a reduce-scatter over Gloo, one rank's chunk is at most fallback_piece
  // elements (its receive buffer is the whole input's size).
  ACCEL_DECL bool starts_allgather(const torch::Tensor& input) const;
  ACCEL_DECL bool starts_reduce_scatter(const torch::Tensor& flat) const;
  // Start the all-gather into `flat_output` of `input` (contiguous, 1-D; this rank's slot of
  // `flat_output` itself, or apart from it) and the sum (or mean) reduce-scatter of `flat` into
  // `result` (contiguous, one rank's chunk, apart from `flat`): await() them, with both tensors
  // kept unchanged and alive until then. NCCL runs its native ops. Over Gloo no temporary of the
  // collective's size is allocated: c10d's Gloo all-gathers into a flat buffer of its own and
  // copies it out, and its reduce-scatter (2.x) all-reduces a copy of the whole input, twice the
  // bytes on the wire; on CPU, under Zero3's heap threshold, each such buffer is mapped and
  // faulted in fresh at every collective (docs/concepts/performance.md, "Two nodes over Gloo
  // TCP"). So the all-gather is a broadcast from each rank of its slot, in place, and the
  // reduce-scatter an alltoall into a kept buffer (kept_buffers.hpp) summed into `result`.
  ACCEL_DECL C10dStarted begin_allgather_into(torch::Tensor& flat_output,
                                              const torch::Tensor& input);
  ACCEL_DECL C10dStarted begin_reduce_scatter(torch::Tensor& result, const torch::Tensor& flat,
                                              ReduceOp op);
  // Root's `tensor` (contiguous) on every rank, its bytes as they are.
  ACCEL_DECL void broadcast_bytes(torch::Tensor& tensor, int root, const CollectiveCall& call);
  ACCEL_DECL void broadcast_cuda(torch::Tensor& tensor, int root, const CollectiveCall& call);
  // The handle of `work` started here (transport.hpp).
  ACCEL_DECL PendingCollective started(const CollectiveCall& call, const torch::Tensor& input,
                                       C10dStarted work);

  // await() of one call, as the fallbacks take it (wire_fallbacks.hpp).
  struct Waiter {
    C10dTransport* transport;
    const CollectiveCall* call;
    void operator()(const c10::intrusive_ptr<c10d::Work>& work) const {
      transport->await(work, *call);
    }
  };
  static double seconds(std::chrono::milliseconds duration) {
    return std::chrono::duration<double>(duration).count();
  }
  static std::string finished_key(int rank) { return fmt::format("accel/finished/{}", rank); }

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  bool broken_ = false;
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  c10::intrusive_ptr<detail::CommBackend> gloo_;  // CPU tensors
  c10::intrusive_ptr<detail::CommBackend> nccl_;  // CUDA tensors (training on CUDA)
  std::unique_ptr<DirectGloo> direct_;            // made by the first register_ring
  KeptBuffers received_;                          // the reduce-scatters' over Gloo
  // Gloo and NCCL only (shared memory compares its calls itself); after store_: its thread
  // stops before the store goes.
  std::unique_ptr<StuckCollectiveWatch> stuck_watch_;
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/c10d_transport.ipp"
#endif
