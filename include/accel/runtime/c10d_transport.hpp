// A process group's ranks connected through c10d: Gloo for CPU tensors, NCCL for CUDA tensors
// where the ranks train on CUDA (nccl.hpp), Gloo's registered buffers for small all-reduces
// (direct_gloo.hpp), and the stuck-collective watch over them (stuck_collective.hpp). Each
// collective takes the backend's native op where it has one and the fallback where it does not
// (wire_fallbacks.hpp); waiting on the work and naming its failures is here too, and so is the
// teardown through the store that records which ranks have left the group. Which transport
// carries a collective is the group's choice (process_group.hpp).
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/torch_compat.hpp"
#include "collective_call.hpp"
#include "direct_gloo.hpp"
#include "error_line.hpp"
#include "failure_record.hpp"
#include "group_settings.hpp"
#include "nccl.hpp"
#include "reduce_op.hpp"
#include "store_text.hpp"
#include "stuck_collective.hpp"
#include "tensor_layout.hpp"
#include "wire_fallbacks.hpp"

namespace accel::runtime {

// Gloo's device between nodes: the interface GLOO_SOCKET_IFNAME names (as in PyTorch), else
// the one this host name resolves to.
inline std::shared_ptr<::gloo::transport::Device> gloo_device_for_nodes() {
  const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
  if (interface == nullptr || *interface == '\0')
    return c10d::ProcessGroupGloo::createDefaultDevice();
  try {
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  } catch (const std::exception& error) {
    detail::fail("GLOO_SOCKET_IFNAME={} cannot carry Gloo's connections ({}); set it to this "
                 "node's interface on the network the nodes share (`ip -br addr` lists them), "
                 "or unset it",
                 interface, error.what());
  }
}

class C10dTransport {
 public:
  // Collective: Gloo's connections (and NCCL's group, made at its first collective) between
  // the `size` ranks on `store`, the group's own key space. `same_host`: keep Gloo on loopback.
  // `watch_stuck`: run the stuck-collective watch (a group whose CPU tensors go through shared
  // memory does not need it: that transport compares every call).
  C10dTransport(c10::intrusive_ptr<c10d::Store> store, int rank, int size, bool same_host,
                const GroupSettings& settings, bool watch_stuck)
      : rank_(rank), size_(size), timeout_(settings.timeout), store_(std::move(store)) {
    const auto rendezvous = settings.rendezvous_timeout;
    // The rendezvous (the store's keys and Gloo's connections) waits for ranks still starting;
    // the collectives after it wait for ranks still computing: two timeouts.
    store_->setTimeout(rendezvous);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout_);
    // One host: keep Gloo's connections on loopback. Several: gloo_device_for_nodes().
    device_ = same_host ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                        : gloo_device_for_nodes();
    options->devices.push_back(device_);
    try {
      gloo_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank_, size_, options);
    } catch (const std::exception& error) {
      detail::fail("rank {} of {}: the ranks did not all meet within the rendezvous timeout of "
                   "{} s (Options::rendezvous_timeout, ACCEL_RENDEZVOUS_TIMEOUT); is every rank "
                   "started, with the same WORLD_SIZE? {}",
                   rank_, size_, seconds(rendezvous), error_line(error));
    }
    store_->setTimeout(timeout_);
#if defined(USE_C10D_NCCL)  // without it, join_group() refuses CUDA ranks before this
    if (settings.cuda_device)
      nccl_ = make_nccl_backend(store_, rank_, size_, *settings.cuda_device, timeout_);
#endif
    if (watch_stuck) stuck_watch_ = std::make_unique<StuckCollectiveWatch>(store_, rank_, size_);
  }

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
  detail::CommBackend& backend_for(const torch::Tensor& t) {
    if (!t.is_cuda()) return *gloo_;
    if (!nccl_)
      detail::fail("rank {}: a collective on a tensor on {} in a group of ranks that train on the "
                   "CPU (no NCCL group); move the tensor to the CPU first, or train on CUDA",
                   rank_, t.device().str());
    return *nccl_;
  }

  // Waits for `work`, watched for ranks stuck in other collectives; a failure names `call`.
  void await(const c10::intrusive_ptr<c10d::Work>& work, const CollectiveCall& call) {
    try {
      const StuckCollectiveWatch::Waiting waiting(stuck_watch_.get(), call.sequence,
                                                  [&call] { return describe(call); });
      work->wait();
    } catch (const std::exception& error) {
      failed(call, error);
    }
  }

  // A sum all-reduce of `flat` in place over buffers registered with Gloo now (direct_gloo.hpp),
  // on its own key space and connections, made at the first one: c10d's never see these
  // messages. Collective, as registering is; `flat` must keep its storage while the ring lives.
  std::unique_ptr<gloo::Algorithm> register_ring(torch::Tensor& flat) {
    if (!direct_)
      direct_ = std::make_unique<DirectGloo>(
          c10::make_intrusive<c10d::PrefixStore>("accel/direct", store_), rank_, size_, device_,
          timeout_);
    return direct_->ring_allreduce(flat);
  }
  // Runs a registered ring on the calling thread, watched as await() watches.
  void run(gloo::Algorithm& ring, const CollectiveCall& call) {
    try {
      const StuckCollectiveWatch::Waiting waiting(stuck_watch_.get(), call.sequence,
                                                  [&call] { return describe(call); });
      ring.run();
    } catch (const std::exception& error) {
      failed(call, error);
    }
  }

  // A collective failed (a timeout, a peer gone): the error names it, what the peers were doing
  // as far as the store knows, and the timeout. The group is then broken: teardown skips its
  // wait.
  [[noreturn]] void failed(const CollectiveCall& call, const std::exception& error) {
    broken_ = true;
    // For the launcher's root cause (failure_record.hpp): a connection a peer closed, not a
    // timeout, means that the peer failed first.
    const std::string line = error_line(error);
    if (looks_like_peer_gone(line)) note_failure_after_peer(line);
    std::string peers;
    try {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || !store_->check({finished_key(r)})) continue;
        const auto issued = store_->get(finished_key(r));
        peers += fmt::format("; rank {} has left the group after issuing {} collectives", r,
                             store_text(issued));
      }
    } catch (...) {
      peers += "; the rendezvous store is unreachable (rank 0, which hosts it, may have exited)";
    }
    detail::fail("{} failed on rank {}: {}{}. A rank that stops, exits or skips this collective "
                 "makes the others wait up to the timeout of {} s (Options::timeout, "
                 "ACCEL_TIMEOUT); Options::check_collectives (ACCEL_CHECK_COLLECTIVES=1) names "
                 "mismatched calls",
                 describe(call), rank_, line, peers, seconds(timeout_));
  }

  // The collectives. `call` (numbered by the group) names a failure.
  void barrier(const CollectiveCall& call) { await(gloo_->barrier(), call); }

  // In place; mean divides the sum by the world size (Gloo has no AVG).
  void allreduce(torch::Tensor& tensor, ReduceOp op, const CollectiveCall& call) {
    on_wire(tensor, [&](torch::Tensor& wire) {
      std::vector<torch::Tensor> list{wire};
      c10d::AllreduceOptions options;
      options.reduceOp = c10d_reduce_op(op);
      await(backend_for(wire).allreduce(list, options), call);
    });
    if (op == ReduceOp::mean) tensor.div_(size_);
  }
  // Starts a sum all-reduce of `sent` (contiguous, of a dtype the wire carries): await() it.
  c10::intrusive_ptr<c10d::Work> start_allreduce(const torch::Tensor& sent) {
    std::vector<torch::Tensor> list{sent};
    return backend_for(sent).allreduce(list);
  }

  // Root's `tensor` (contiguous) on every rank, its bytes as they are: the layout check is the
  // caller's (a CPU broadcast's payload carries the root's layout; broadcast_checked() below).
  void broadcast(torch::Tensor& tensor, int root, const CollectiveCall& call) {
    std::vector<torch::Tensor> list{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    await(backend_for(tensor).broadcast(list, options), call);
  }
  // A broadcast of a CUDA tensor: the root's layout over Gloo (a CPU tensor, checked as on the
  // CPU path), then the data over NCCL straight into the tensor (or a contiguous stand-in).
  void broadcast_checked(torch::Tensor& tensor, int root, const CollectiveCall& call) {
    const torch::Tensor mine = describe_layout(tensor);
    torch::Tensor layout = mine.clone();
    broadcast(layout, root, call);
    if (rank_ != root && !torch::equal(layout, mine))
      detail::fail("broadcast #{} from rank {}: the root sent {} and rank {} passed {}; every rank "
                   "must pass a tensor of the root's dtype and shape",
                   call.sequence, root, layout_text(layout), rank_, layout_text(mine));
    torch::Tensor data = tensor.contiguous();
    broadcast(data, root, call);
    if (!data.is_same(tensor)) tensor.copy_(data);
  }

  // Every rank's `input` (contiguous, at least 1-D), concatenated along dimension 0 in rank order.
  torch::Tensor allgather(const torch::Tensor& input, const CollectiveCall& call) {
    if (!has_allgather_base(input) || !wire_native(input)) return allgather_by_list(input, call);
    std::vector<std::int64_t> shape = input.sizes().vec();
    shape[0] *= size_;
    torch::Tensor output = torch::empty(shape, input.options());
    torch::Tensor in = input;
    await(backend_for(input)._allgather_base(output, in), call);
    return output;
  }
  // Every rank's `input` written into `flat_output` (size() x input's elements, rank order).
  void allgather_into(torch::Tensor& flat_output, const torch::Tensor& input,
                      const CollectiveCall& call) {
    if (!has_allgather_base(input) || !wire_native(input)) {
      allgather_into_by_list(flat_output, input, call);
      return;
    }
    // A copy of the input: the native op may write this rank's slot while reading the input.
    torch::Tensor in = input.reshape(-1).clone();
    await(backend_for(input)._allgather_base(flat_output, in), call);
  }
  // This rank's chunk of `flat` (size() equal chunks), summed over the ranks, or averaged.
  torch::Tensor reduce_scatter(const torch::Tensor& flat, ReduceOp op, const CollectiveCall& call) {
    if (!has_reduce_scatter_base(flat) || !wire_native(flat))
      return reduce_scatter_by_alltoall(flat, op, call);
    torch::Tensor result = torch::empty({flat.numel() / size_}, flat.options());
    torch::Tensor in = flat;
    c10d::ReduceScatterOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    await(backend_for(flat)._reduce_scatter_base(result, in, options), call);
    if (op == ReduceOp::mean) result.div_(size_);
    return result;
  }

  // The fallbacks alone (wire_fallbacks.hpp), whatever the backend has: what the three above
  // take where it lacks the native op, and what the group's *_portable collectives run.
  torch::Tensor allgather_by_list(const torch::Tensor& input, const CollectiveCall& call) {
    return runtime::allgather_by_list(backend_for(input), size_, input, Waiter{this, &call});
  }
  void allgather_into_by_list(torch::Tensor& flat_output, const torch::Tensor& input,
                              const CollectiveCall& call) {
    runtime::allgather_into_by_list(backend_for(input), size_, flat_output, input,
                                    Waiter{this, &call});
  }
  torch::Tensor reduce_scatter_by_alltoall(const torch::Tensor& flat, ReduceOp op,
                                           const CollectiveCall& call) {
    torch::Tensor result =
        runtime::reduce_scatter_by_alltoall(backend_for(flat), size_, flat, Waiter{this, &call});
    if (op == ReduceOp::mean) result.div_(size_);
    return result;
  }

  // Leaving the group, after `issued` collectives. Gloo fails a peer's pending receive when this
  // side closes its connections, so a rank that finished first waits, briefly, for the others
  // to reach here too (through the store, not Gloo): long enough for the last collective's final
  // bytes to arrive everywhere, short enough that peers stuck in a collective this rank never
  // joins learn of it within seconds (closing the connections fails their collective at once).
  // `failing` (an exception unwinds through the group's owner, or a collective failed: the group
  // is broken then anyway): no wait at all. (An error the program caught still waits: its peers
  // may be finishing the last collective, as when every rank raised the same error.)
  void leave(std::uint64_t issued, bool failing) noexcept {
    try {
      store_->set(finished_key(rank_), store_bytes(std::to_string(issued)));
      if (failing) return;
      std::vector<std::string> keys;
      for (int r = 0; r < size_; ++r) keys.push_back(finished_key(r));
      store_->wait(keys, std::min<std::chrono::milliseconds>(timeout_, teardown_wait));
    } catch (...) {
      // A peer that is gone or late cannot be waited for; its launcher is bringing it down.
    }
  }
  static constexpr std::chrono::milliseconds teardown_wait = std::chrono::seconds(3);

 private:
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
  // Gloo and NCCL only (shared memory compares its calls itself); after store_: its thread
  // stops before the store goes.
  std::unique_ptr<StuckCollectiveWatch> stuck_watch_;
};

}  // namespace accel::runtime
