// The ProcessGroup's path through shared memory (shm/transport.hpp) for CPU tensors when every
// rank of the group is on this host: the transport, set up through the group's store, and the
// thread that runs its asynchronous collectives in the order they were issued, so that Ddp's
// bucket all-reduces overlap backward as c10d's do. A blocking collective waits for those
// issued before it and then runs on the caller's thread: the ranks issue collectives in the same
// order, so the transport sees them in the same order on every rank. Its failures name the
// group's collective (failed()), as c10d's do (c10d_transport.hpp).
//
// On by default; Options::shared_memory = false or ACCEL_SHARED_MEMORY=0 turns it off (Gloo over
// loopback then carries everything, as across nodes and for CUDA tensors).
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "c10d_started.hpp"
#include "collective_call.hpp"
#include "completion.hpp"
#include "failure_record.hpp"
#include "pending_collective.hpp"
#include "reduce_op.hpp"
#include "shm/regions.hpp"
#include "shm/transport.hpp"
#include "transport.hpp"
#include "transport_declarations.hpp"

namespace accel::runtime {

// The transport's element type for a tensor it can carry, or nothing (Gloo carries it).
ACCEL_DECL std::optional<shm::DataType> shared_memory_type(const torch::Tensor& t);

class SharedMemoryPath {
 public:
  // Bytes of each rank's slot: a collective streams through 2 x (ranks + 1) of them.
  static constexpr std::size_t slot_bytes = std::size_t{1} << 20;

  // Collective over the group: rank 0 creates the segment, named from `run_token` (the launch's,
  // for its clean-up; empty without one), random bits and `group`, and shares the name through
  // the store. `left_peers` says which peers have left the group, for the failures (as c10d's
  // name them: C10dTransport::left_peers): a rank that skipped a collective and finished shows
  // up as having issued fewer.
  ACCEL_DECL SharedMemoryPath(c10d::Store& store, std::string run_token, const std::string& group,
                              int rank, int size, std::chrono::milliseconds timeout,
                              std::function<std::string()> left_peers);

  SharedMemoryPath(const SharedMemoryPath&) = delete;
  SharedMemoryPath& operator=(const SharedMemoryPath&) = delete;
  ACCEL_DECL ~SharedMemoryPath();

  // Queues `collective` (a call on the transport) behind those issued before it.
  ACCEL_DECL std::shared_ptr<Completion> submit(std::function<void(shm::Transport&)> collective);
  // The same, waiting for it; rethrows its error. Runs on the calling thread once the queue is
  // empty (no hand-off to the worker thread: most collectives are blocking, and small).
  template <class Collective>
  void run(Collective&& collective) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
      busy_ = true;
    }
    struct Done {
      SharedMemoryPath& path;
      ~Done() {
        {
          const std::scoped_lock lock(path.mutex_);
          path.busy_ = false;
        }
        path.changed_.notify_all();
      }
    } done{*this};
    collective(transport_);
  }

  // The transport's errors say what happened in full (the peer gone or late, each rank's call
  // on a mismatch, the timeout): the group's error adds which of its collectives it was. The
  // group is broken afterwards: its teardown skips its wait.
  [[noreturn]] ACCEL_DECL void failed(const CollectiveCall& call, const std::exception& error);
  // Whether a collective through here failed (failed()).
  bool broken() const { return broken_; }

  // The group's teardown: once the collectives issued here have run, this rank leaves the
  // transport (shm::Transport::leave), so that a peer still waiting for it in a collective it
  // skipped fails at once, naming it and (`left_peers`) how many collectives it issued.
  ACCEL_DECL void leave();

  // The group's collectives (transport.hpp) on CPU tensors: the reductions on a type the
  // transport carries (shared_memory_type()), all-gather and broadcast on any (they copy bytes).
  // The blocking ones run here, behind the asynchronous ones issued before, and name `call`
  // when they fail; the start_ ones queue the collective on the path's thread and keep the
  // tensors' storage alive until it has run.
  ACCEL_DECL bool carries(CollectiveOp op, const torch::Tensor& t) const;
  bool starts(CollectiveOp op, const torch::Tensor& t) const {
    return carries(op, t) && t.is_contiguous();
  }
  // Through here, where a peer in another collective meets it: a rank in a barrier of Gloo's
  // and a peer in a shared-memory collective would each wait the whole timeout.
  ACCEL_DECL void barrier(const CollectiveCall& call);
  ACCEL_DECL void allreduce(torch::Tensor& tensor, ReduceOp op, const CollectiveCall& call);
  ACCEL_DECL void broadcast(torch::Tensor& tensor, int root, const CollectiveCall& call);
  ACCEL_DECL torch::Tensor allgather(const torch::Tensor& input, const CollectiveCall& call);
  ACCEL_DECL void allgather_into(torch::Tensor& output, const torch::Tensor& input,
                                 const CollectiveCall& call);
  ACCEL_DECL torch::Tensor reduce_scatter(const torch::Tensor& flat, ReduceOp op,
                                          const CollectiveCall& call);
  ACCEL_DECL PendingCollective start_allreduce(const torch::Tensor& sent,
                                               const CollectiveCall& call);
  ACCEL_DECL PendingCollective start_allgather_into(torch::Tensor& output,
                                                    const torch::Tensor& input,
                                                    const CollectiveCall& call);
  // Into `into` where given (it may be this rank's chunk of `input`: in place), else a chunk of
  // its own.
  ACCEL_DECL PendingCollective start_reduce_scatter(const torch::Tensor& input, torch::Tensor& into,
                                                    ReduceOp op, const CollectiveCall& call);

  // Collective: a segment of one region of `bytes` per rank that every rank maps (shm/regions.hpp),
  // made by rank 0 and named to the others through `store`, as the transport's own segment is.
  ACCEL_DECL std::shared_ptr<shm::Regions> map_regions(c10d::Store& store,
                                                       const std::string& run_token,
                                                       const std::string& group,
                                                       std::size_t bytes,
                                                       const CollectiveCall& call);
  // `data`, in this rank's region of `regions`, summed with the same place of every rank's
  // region, times `scale`, in place (Transport::allreduce_regions), here, behind the
  // asynchronous collectives issued before it.
  ACCEL_DECL void allreduce_regions(shm::Regions& regions, const torch::Tensor& data,
                                    shm::DataType type, double scale, const CollectiveCall& call);
  // The same on the path's thread; keeps `regions` mapped and `data` alive until it has run.
  ACCEL_DECL PendingCollective start_allreduce_regions(std::shared_ptr<shm::Regions> regions,
                                                      torch::Tensor data, shm::DataType type,
                                                      double scale, const CollectiveCall& call);

 private:
  // Rank 0 creates a segment of `bytes` under a fresh random name (shm/segment_name.hpp) and
  // passes the name on through the store under `key`; the others open it. Nobody outside the
  // run can guess the name, so nobody can take it first. For the transport's segment (connect)
  // and for regions (map_regions).
  ACCEL_DECL static shm::Segment share_segment(c10d::Store& store, const std::string& key,
                                               const std::string& run_token,
                                               const std::string& group, int rank,
                                               std::size_t bytes,
                                               std::chrono::milliseconds timeout);
  ACCEL_DECL static shm::Transport connect(c10d::Store& store, const std::string& run_token,
                                           const std::string& group, int rank, int size,
                                           std::chrono::milliseconds timeout);

  // run(), a failure named as `call`'s.
  template <class Collective>
  void named(const CollectiveCall& call, Collective&& collective) {
    try {
      run(std::forward<Collective>(collective));
    } catch (const std::exception& error) {
      failed(call, error);
    }
  }
  static std::size_t byte_size(const torch::Tensor& t) {
    return static_cast<std::size_t>(t.numel()) * t.element_size();
  }
  // Where `data` lies in this rank's region.
  static std::size_t offset_in(const shm::Regions& regions, const torch::Tensor& data) {
    return static_cast<std::size_t>(static_cast<const std::byte*>(data.data_ptr()) -
                                    regions.mine());
  }

  // A queued collective's handle (transport.hpp): `done` is the Completion submit() returned.
  PendingCollective started(const CollectiveCall& call, const torch::Tensor& input,
                            std::shared_ptr<Completion> done) {
    done->path = this;
    PendingCollective pending;
    pending.sequence = call.sequence;
    pending.input = input;
    pending.done = std::move(done);
    return pending;
  }

  ACCEL_DECL void serve();

  int rank_;
  std::chrono::milliseconds timeout_;
  std::function<std::string()> left_peers_;
  int regions_mapped_ = 0;  // map_regions calls: each names its segment under a key of its own
  bool broken_ = false;  // a collective failed (failed(), on the thread that waited for it)
  shm::Transport transport_;
  std::mutex mutex_;
  std::condition_variable changed_;  // the queue or busy_ changed
  std::deque<std::packaged_task<void()>> queue_;
  bool busy_ = false;  // a collective runs, on the worker or on a caller's thread
  bool stopping_ = false;
  std::thread worker_;  // last: starts once the rest exists
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/shared_memory_path.ipp"
#endif
