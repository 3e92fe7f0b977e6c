// The group of ranks and the collectives accel uses: a router over the transports (transport.hpp).
// Every collective takes the same steps, written once as a layer over any transport (checked()):
// it is numbered and, with checking on, compared across the ranks (collective_check.hpp), and
// spanned for the profiler; then it runs on the transport that carries it (routed()): CPU
// tensors through shared memory when every rank is on this host (shared_memory_path.hpp, shm/),
// the rest through c10d (c10d_transport.hpp): NCCL for CUDA tensors where the ranks train on
// CUDA, Gloo for everything else, with the gaps of a backend filled once (wire_fallbacks.hpp); a
// failure names the collective. Tests reach the layer over transports of their own through
// accel::testing::Fallbacks (fallback_transport.hpp) and accel::testing::Faults
// (fault_transport.hpp).
//
// Beside it, each with one job: what the group is told (group_settings.hpp), where its ranks
// meet (group_store.hpp, admission.hpp, tcp_store.hpp), the reductions (reduce_op.hpp), the
// handles of collectives started now and waited for later (pending_collective.hpp), the
// all-reduce over registered buffers (registered_allreduce.hpp), the broadcast's layout header
// (tensor_layout.hpp), and the process-wide terminate handler that explains Gloo's aborts
// (gloo_abort_handler.hpp), which the first group installs.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "collective_call.hpp"
#include "collective_check.hpp"
#include "environment.hpp"
#include "group_settings.hpp"
#include "pending_collective.hpp"
#include "reduce_op.hpp"
#include "registered_allreduce.hpp"
#include "shm/elements.hpp"
#include "transport.hpp"
#include "transport_declarations.hpp"

namespace accel::runtime {

class ProcessGroup {
 public:
  ACCEL_DECL ProcessGroup(const Environment& env, GroupSettings settings);

  // A group of some of this group's ranks. Every rank calls it, in the same order, with the same
  // `purpose`; the ranks passing the same `color` form one group, in their order here.
  // `same_host`: its ranks share this host (Gloo on loopback, and shared memory unless turned
  // off). Fsdp<HybridShard> splits the job into its nodes and across them.
  ACCEL_DECL std::unique_ptr<ProcessGroup> split(std::string_view purpose, int color,
                                                 bool same_host);

  // Waits, briefly, for the others to leave too (C10dTransport::leave); not at all while an
  // exception unwinds through the group's owner or after a collective failed.
  ACCEL_DECL ~ProcessGroup();

  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  // Ranks on this node (LOCAL_WORLD_SIZE).
  int local_size() const { return local_size_; }
  // Whether CPU tensors travel through shared memory (every rank on this host, not turned off).
  bool uses_shared_memory() const { return shm_ != nullptr; }
  std::uint64_t collectives_issued() const { return calls_.issued(); }

  // Names the library call whose collectives follow, for as long as it lives ("save_state"):
  // errors and the stuck-collective watch then say "allgather #12 (Long, shape 1) in
  // save_state". The outermost call names them. `group` may be null (one process).
  class Caller {
   public:
    ACCEL_DECL Caller(ProcessGroup* group, std::string_view name);
    ACCEL_DECL ~Caller();
    Caller(const Caller&) = delete;
    Caller& operator=(const Caller&) = delete;

   private:
    ProcessGroup* group_;
  };

  ACCEL_DECL void barrier();

  // In place; mean divides the sum by the world size (Gloo has no AVG).
  ACCEL_DECL void allreduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::sum);

  // A collective started on the shared-memory path's thread, or as c10d's work (Gloo's threads,
  // NCCL's stream), so that it overlaps what this thread computes next (Ddp's buckets, Zero3's
  // prefetch, Zero2's reduce-scatter of each gradient bucket during backward): its handle,
  // pending_collective.hpp.
  using PendingCollective = runtime::PendingCollective;

  // Starts a sum all-reduce of a contiguous tensor.
  ACCEL_DECL PendingCollective allreduce_async(torch::Tensor tensor);
  // The same with the stand-in given: `wire` travels, and its sum lands in `tensor` at wait().
  ACCEL_DECL PendingCollective allreduce_async(torch::Tensor tensor, torch::Tensor wire);

  // One region of `bytes` per rank in a shared-memory segment that every rank of the group maps
  // (shm/regions.hpp): Ddp keeps its buckets there and all-reduces them where they lie
  // (allreduce_in_regions_async). Collective; null where the group has no shared-memory path.
  ACCEL_DECL std::shared_ptr<shm::Regions> share_regions(std::size_t bytes);
  // Starts the sum all-reduce, times `scale`, of `flat`: contiguous fp32 or fp64 in this rank's
  // region of `regions`, at the same place on every rank. Every rank's region holds the result
  // once wait() returns; `flat` must not change until then.
  ACCEL_DECL PendingCollective allreduce_in_regions_async(std::shared_ptr<shm::Regions> regions,
                                                           torch::Tensor flat, double scale);
  // The same on the calling thread (Ddp's small buckets), once those issued before have run.
  ACCEL_DECL void allreduce_in_regions(shm::Regions& regions, const torch::Tensor& flat,
                                       double scale);

  // A sum all-reduce whose buffers are registered once, run on the calling thread: Ddp's small
  // buckets (registered_allreduce.hpp). Collective; takes what DirectGloo::can_register accepts.
  using RegisteredAllreduce = runtime::RegisteredAllreduce;
  ACCEL_DECL RegisteredAllreduce register_allreduce(torch::Tensor flat);

  ACCEL_DECL void broadcast(torch::Tensor& tensor, int root = 0);

  // Every rank's tensor (all of one shape), concatenated along dimension 0 in rank order; a
  // 0-dim tensor counts as shape [1].
  ACCEL_DECL torch::Tensor allgather(const torch::Tensor& tensor);

  // Every rank's `input` (one contiguous tensor, the same size everywhere) written into
  // `output`, a contiguous tensor of size() x input's elements, in rank order: the sharded
  // strategies gather updated shards straight back into a flat parameter, with no extra copy of
  // the whole. `input` may alias this rank's slot of `output`.
  ACCEL_DECL void allgather_into(torch::Tensor& output, const torch::Tensor& input);

  // allgather_into, started (see allreduce_async).
  ACCEL_DECL PendingCollective allgather_into_async(torch::Tensor output, torch::Tensor input);
  // reduce_scatter (below), started on the shared-memory path's thread where it carries `input`,
  // else as c10d's work; the chunk is `result` once wait() returns. `input` must stay unchanged
  // until then. `into`, when given (contiguous, of the chunk's size and dtype), is where the
  // shared-memory path puts the chunk, and may be this rank's chunk of `input` itself: a
  // reduce-scatter in place, without a buffer of its own.
  ACCEL_DECL PendingCollective reduce_scatter_async(const torch::Tensor& input,
                                                    ReduceOp op = ReduceOp::sum,
                                                    torch::Tensor into = {});

  // input holds size() equal chunks along its flat layout; returns this rank's chunk, summed
  // over ranks (or averaged with ReduceOp::mean).
  ACCEL_DECL torch::Tensor reduce_scatter(const torch::Tensor& input, ReduceOp op = ReduceOp::sum);

  // Rank root's bytes on every rank (the others' argument is ignored).
  ACCEL_DECL std::string broadcast_bytes(const std::string& bytes, int root);

  // Raw bytes from every rank, in rank order; lengths may differ (for gather_object).
  ACCEL_DECL std::vector<std::string> allgather_bytes(const std::string& bytes);

 private:
  // A subgroup (split()): its own key space under the parent's, the parent's settings.
  ACCEL_DECL ProcessGroup(const ProcessGroup& parent, const std::string& id, int rank, int size,
                          bool same_host);

  // The rest of a group's set-up, on its own key space `store`: Gloo's connections (and NCCL's),
  // then the shared-memory path, or else the stuck-collective watch.
  ACCEL_DECL void join(c10::intrusive_ptr<c10d::Store> store, std::string id, bool same_host);

  // The layer every collective goes through, once: numbered and, with checking on, compared
  // across the ranks (collective_check.hpp: `operation` names it there), spanned as `name`
  // (static text; `started`: the span of its issue, else of the whole), then run as
  // `run(transport, call)`. A template over the transport (transport.hpp), as c10d's
  // ProcessGroupWrapper is a decorator over its Backend, with direct calls instead of virtual ones.
  // An error the transport throws without naming the collective (anything but an accel::Error)
  // comes out as one that does: the collective, its number, the rank and the transport's text.
  template <class T, class Run>
  decltype(auto) checked(T& transport, std::string operation, const char* name,
                         const torch::Tensor& tensor, bool started, Run&& run);
  // The routing, once: `run(transport)` on shared memory where it carries `op` on `t`
  // (Transport::carries; `starting`: where it starts it), else on c10d.
  template <class Run>
  decltype(auto) routed(CollectiveOp op, const torch::Tensor& t, bool starting, Run&& run);
  // checked() over routed(), for a blocking collective and for a started one.
  template <class Run>
  decltype(auto) collective(CollectiveOp op, std::string operation, const char* name,
                            const torch::Tensor& tensor, const torch::Tensor& routed_by, Run&& run);
  template <class Run>
  PendingCollective start(CollectiveOp op, const char* name, const torch::Tensor& tensor,
                          Run&& run);
  // Whether a transport of the group starts `op` on `t` (else a blocking fallback runs).
  ACCEL_DECL bool starts(CollectiveOp op, const torch::Tensor& t) const;

  // The element type of `flat`, which must lie in this rank's region of `regions`.
  ACCEL_DECL shm::DataType check_in_regions(const shm::Regions* regions,
                                            const torch::Tensor& flat) const;
  ACCEL_DECL void check_gather_layout(const torch::Tensor& output,
                                      const torch::Tensor& input) const;
  // What allgather sends: a 0-dim tensor as shape [1], contiguous.
  static torch::Tensor gather_input(const torch::Tensor& t) {
    return t.dim() == 0 ? t.reshape({1}) : t.contiguous();
  }

  // They run through checked() on this group's c10d: the registered all-reduce and the test
  // transport's collectives; the fault-injecting transport's through routed() too.
  friend class runtime::RegisteredAllreduce;
  friend class testing::Fallbacks;
  friend class testing::Faults;

  int rank_;
  int size_;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string run_token_;  // for shared-memory segment names: the launch's, or empty
  std::string id_;         // this group's among the job's: "0", a subgroup "0.node1"
  GroupSettings settings_;
  CollectiveCheck calls_;  // numbers and checks every collective; the Caller's name
  // A transport threw an error of its own (not one it named, which marks the transport broken):
  // the peers' state in that collective is unknown, so the group leaves without waiting for them.
  bool broken_ = false;
  std::unique_ptr<C10dTransport> c10d_;
  // Last, so that it goes first: its thread stops before the rest of the group.
  std::unique_ptr<SharedMemoryPath> shm_;
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/process_group.ipp"
#endif
// After the group: the registered all-reduce runs through its layer, and the pending
// collective's wait() through the transports that its header comes before.
#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/registered_allreduce.ipp"
#endif
#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/pending_collective.ipp"
#endif
