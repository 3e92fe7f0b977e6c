// C10dTransport, the collectives through c10d; c10d_transport.hpp includes it in header-only mode.
#pragma once

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "../c10d_transport.hpp"
#include "../completion.hpp"

namespace accel::runtime {

ACCEL_DECL std::shared_ptr<::gloo::transport::Device> gloo_device_for_nodes() {
  const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
  if (interface == nullptr || *interface == '\0')
    return c10d::ProcessGroupGloo::createDefaultDevice();
  try {
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  } catch (const std::exception& error) {
    accel::detail::fail("GLOO_SOCKET_IFNAME={} cannot carry Gloo's connections ({}); set it to "
                        "this node's interface on the network the nodes share (`ip -br addr` lists "
                        "them), or unset it",
                        interface, error.what());
  }
}

ACCEL_DECL C10dTransport::C10dTransport(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                        bool same_host, const GroupSettings& settings,
                                        bool watch_stuck)
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
    accel::detail::fail("rank {} of {}: the ranks did not all meet within the rendezvous timeout "
                        "of {} s (Options::rendezvous_timeout, ACCEL_RENDEZVOUS_TIMEOUT); is every "
                        "rank started, with the same WORLD_SIZE? {}",
                        rank_, size_, seconds(rendezvous), error_line(error));
  }
  store_->setTimeout(timeout_);
#if defined(USE_C10D_NCCL)  // without it, join_group() refuses CUDA ranks before this
  if (settings.cuda_device)
    nccl_ = make_nccl_backend(store_, rank_, size_, *settings.cuda_device, timeout_);
#endif
  if (watch_stuck) stuck_watch_ = std::make_unique<StuckCollectiveWatch>(store_, rank_, size_);
}

ACCEL_DECL accel::detail::CommBackend& C10dTransport::backend_for(const torch::Tensor& t) {
  if (!t.is_cuda()) return *gloo_;
  if (!nccl_)
    accel::detail::fail("rank {}: a collective on a tensor on {} in a group of ranks that train on "
                        "the CPU (no NCCL group); move the tensor to the CPU first, or train on "
                        "CUDA",
                        rank_, t.device().str());
  return *nccl_;
}

ACCEL_DECL void C10dTransport::await(const c10::intrusive_ptr<c10d::Work>& work,
                                     const CollectiveCall& call) {
  try {
    const StuckCollectiveWatch::Waiting waiting(stuck_watch_.get(), call.sequence,
                                                [&call] { return describe(call); });
    work->wait();
  } catch (const std::exception& error) {
    failed(call, error);
  }
}

ACCEL_DECL std::unique_ptr<gloo::Algorithm> C10dTransport::register_ring(torch::Tensor& flat) {
  if (!direct_)
    direct_ = std::make_unique<DirectGloo>(
        c10::make_intrusive<c10d::PrefixStore>("accel/direct", store_), rank_, size_, device_,
        timeout_);
  return direct_->ring_allreduce(flat);
}

ACCEL_DECL void C10dTransport::run(gloo::Algorithm& ring, const CollectiveCall& call) {
  try {
    const StuckCollectiveWatch::Waiting waiting(stuck_watch_.get(), call.sequence,
                                                [&call] { return describe(call); });
    ring.run();
  } catch (const std::exception& error) {
    failed(call, error);
  }
}

ACCEL_DECL void C10dTransport::failed(const CollectiveCall& call, const std::exception& error) {
  broken_ = true;
  // For the launcher's root cause (failure_record.hpp): a connection a peer closed, not a
  // timeout, means that the peer failed first.
  const std::string line = error_line(error);
  if (looks_like_peer_gone(line)) note_failure_after_peer(line);
  const std::string peers = left_peers();
  accel::detail::fail("{} failed on rank {}: {}{}. A rank that stops, exits or skips this "
                      "collective makes the others wait up to the timeout of {} s "
                      "(Options::timeout, ACCEL_TIMEOUT); Options::check_collectives "
                      "(ACCEL_CHECK_COLLECTIVES=1) names mismatched calls",
                      describe(call), rank_, line, peers, seconds(timeout_));
}

ACCEL_DECL std::string C10dTransport::left_peers() const noexcept {
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
  return peers;
}

ACCEL_DECL void C10dTransport::allreduce(torch::Tensor& tensor, ReduceOp op,
                                         const CollectiveCall& call) {
  on_wire(tensor, [&](torch::Tensor& wire) {
    std::vector<torch::Tensor> list{wire};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d_reduce_op(op);
    await(backend_for(wire).allreduce(list, options), call);
  });
  if (op == ReduceOp::mean) tensor.div_(size_);
}

ACCEL_DECL bool C10dTransport::starts(CollectiveOp op, const torch::Tensor& t) const {
  switch (op) {
    case CollectiveOp::allreduce: return wire_native(t);
    case CollectiveOp::allgather: return starts_allgather(t);
    case CollectiveOp::reduce_scatter: return starts_reduce_scatter(t) && t.is_contiguous();
    case CollectiveOp::barrier:
    case CollectiveOp::broadcast: return false;
  }
  return false;
}

ACCEL_DECL PendingCollective C10dTransport::started(const CollectiveCall& call,
                                                    const torch::Tensor& input, C10dStarted work) {
  PendingCollective pending;
  pending.sequence = call.sequence;
  pending.input = input;
  pending.done = std::make_shared<Completion>();
  pending.done->c10d = this;
  pending.done->started = std::move(work);
  return pending;
}

ACCEL_DECL PendingCollective C10dTransport::start_allreduce(const torch::Tensor& sent,
                                                            const CollectiveCall& call) {
  std::vector<torch::Tensor> list{sent};
  return started(call, sent, C10dStarted{{backend_for(sent).allreduce(list)}, {}});
}

ACCEL_DECL PendingCollective C10dTransport::start_allgather_into(torch::Tensor& output,
                                                                 const torch::Tensor& input,
                                                                 const CollectiveCall& call) {
  torch::Tensor flat_output = output.view(-1);
  return started(call, input, begin_allgather_into(flat_output, input.reshape(-1)));
}

ACCEL_DECL PendingCollective C10dTransport::start_reduce_scatter(const torch::Tensor& input,
                                                                 torch::Tensor& /*into*/,
                                                                 ReduceOp op,
                                                                 const CollectiveCall& call) {
  const torch::Tensor flat = input.view(-1);
  torch::Tensor result = torch::empty({flat.numel() / size_}, flat.options());
  PendingCollective pending = started(call, flat, begin_reduce_scatter(result, flat, op));
  pending.result = result;
  return pending;
}

ACCEL_DECL bool C10dTransport::starts_allgather(const torch::Tensor& input) const {
  return wire_native(input);
}

ACCEL_DECL bool C10dTransport::starts_reduce_scatter(const torch::Tensor& flat) const {
  return wire_native(flat) && (flat.is_cuda() || flat.numel() / size_ <= fallback_piece);
}

ACCEL_DECL C10dStarted C10dTransport::begin_allgather_into(torch::Tensor& flat_output,
                                                          const torch::Tensor& input) {
  C10dStarted started;
  if (input.is_cuda()) {
    // A copy of the input: the native op may write this rank's slot while reading the input.
    torch::Tensor in = input.reshape(-1).clone();
    started.works.push_back(backend_for(in)._allgather_base(flat_output, in));
    started.then = [in] {};  // keeps the copy until the work is done
    return started;
  }
  const std::int64_t n = input.numel();
  if (n == 0) return started;
  torch::Tensor mine = flat_output.narrow(0, rank_ * n, n);
  if (mine.data_ptr() != input.data_ptr()) mine.copy_(input.view(-1));
  for (int root = 0; root < size_; ++root) {
    std::vector<torch::Tensor> slot{flat_output.narrow(0, root * n, n)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    started.works.push_back(gloo_->broadcast(slot, options));
  }
  return started;
}

ACCEL_DECL C10dStarted C10dTransport::begin_reduce_scatter(torch::Tensor& result,
                                                          const torch::Tensor& flat, ReduceOp op) {
  C10dStarted started;
  torch::Tensor in = flat;
  const int divide_by = op == ReduceOp::mean ? size_ : 1;
  if (flat.is_cuda()) {
    c10d::ReduceScatterOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    started.works.push_back(backend_for(flat)._reduce_scatter_base(result, in, options));
    started.then = [result, divide_by]() mutable {
      if (divide_by > 1) result.div_(divide_by);
    };
    return started;
  }
  // alltoall: chunk j goes to rank j, so this rank receives every rank's chunk of its own, and
  // sums them here (as reduce_scatter_by_alltoall, in one piece).
  const std::int64_t chunk = flat.numel() / size_;
  torch::Tensor received = received_.take(flat.numel(), flat.options());
  std::vector<std::int64_t> equal_split;
  started.works.push_back(gloo_->alltoall_base(received, in, equal_split, equal_split));
  started.then = [result, received, chunk, size = size_, divide_by]() mutable {
    const std::int64_t ranks = 0;  // the dimension summed over
    at::sum_out(result, received.view({size, chunk}), at::IntArrayRef(&ranks, 1));
    if (divide_by > 1) result.div_(divide_by);
  };
  return started;
}

ACCEL_DECL void C10dTransport::await(C10dStarted& started, const CollectiveCall& call) {
  try {
    const StuckCollectiveWatch::Waiting waiting(stuck_watch_.get(), call.sequence,
                                                [&call] { return describe(call); });
    for (const auto& work : started.works) work->wait();
  } catch (const std::exception& error) {
    failed(call, error);
  }
  started.works.clear();
  if (const std::function<void()> then = std::exchange(started.then, {})) then();
}

ACCEL_DECL void C10dTransport::broadcast(torch::Tensor& tensor, int root,
                                         const CollectiveCall& call) {
  if (tensor.is_cuda()) {
    broadcast_cuda(tensor, root, call);
    return;
  }
  broadcast_with_layout(tensor, root, rank_, call.sequence,
                        [&](torch::Tensor& payload) { broadcast_bytes(payload, root, call); });
}

ACCEL_DECL void C10dTransport::broadcast_bytes(torch::Tensor& tensor, int root,
                                         const CollectiveCall& call) {
  std::vector<torch::Tensor> list{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  await(backend_for(tensor).broadcast(list, options), call);
}

ACCEL_DECL void C10dTransport::broadcast_cuda(torch::Tensor& tensor, int root,
                                                 const CollectiveCall& call) {
  const torch::Tensor mine = describe_layout(tensor);
  torch::Tensor layout = mine.clone();
  broadcast_bytes(layout, root, call);
  if (rank_ != root && !torch::equal(layout, mine))
    accel::detail::fail("broadcast #{} from rank {}: the root sent {} and rank {} passed {}; every "
                        "rank must pass a tensor of the root's dtype and shape",
                        call.sequence, root, layout_text(layout), rank_, layout_text(mine));
  torch::Tensor data = tensor.contiguous();
  broadcast_bytes(data, root, call);
  if (!data.is_same(tensor)) tensor.copy_(data);
}

ACCEL_DECL torch::Tensor C10dTransport::allgather(const torch::Tensor& input,
                                                  const CollectiveCall& call) {
  if (!has_allgather_base(input) || !wire_native(input)) return allgather_by_list(input, call);
  std::vector<std::int64_t> shape = input.sizes().vec();
  shape[0] *= size_;
  torch::Tensor output = torch::empty(shape, input.options());
  torch::Tensor in = input;
  await(backend_for(input)._allgather_base(output, in), call);
  return output;
}

ACCEL_DECL void C10dTransport::allgather_into(torch::Tensor& output, const torch::Tensor& input,
                                              const CollectiveCall& call) {
  torch::Tensor flat_output = output.view(-1);
  if (!starts_allgather(input)) {
    allgather_into_by_list(flat_output, input, call);
    return;
  }
  C10dStarted started = begin_allgather_into(flat_output, input.reshape(-1));
  await(started, call);
}

ACCEL_DECL torch::Tensor C10dTransport::reduce_scatter(const torch::Tensor& flat, ReduceOp op,
                                                       const CollectiveCall& call) {
  if (!starts_reduce_scatter(flat)) return reduce_scatter_by_alltoall(flat, op, call);
  torch::Tensor result = torch::empty({flat.numel() / size_}, flat.options());
  C10dStarted started = begin_reduce_scatter(result, flat, op);
  await(started, call);
  return result;
}

ACCEL_DECL torch::Tensor C10dTransport::reduce_scatter_by_alltoall(const torch::Tensor& flat,
                                                                   ReduceOp op,
                                                                   const CollectiveCall& call) {
  torch::Tensor result =
      runtime::reduce_scatter_by_alltoall(backend_for(flat), size_, flat, Waiter{this, &call});
  if (op == ReduceOp::mean) result.div_(size_);
  return result;
}

ACCEL_DECL void C10dTransport::leave(std::uint64_t issued, bool failing,
                                     const std::function<void()>& announced) noexcept {
  try {
    store_->set(finished_key(rank_), store_bytes(std::to_string(issued)));
    if (announced) announced();
    if (failing) return;
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(finished_key(r));
    store_->wait(keys, std::min<std::chrono::milliseconds>(timeout_, teardown_wait));
  } catch (...) {
    // A peer that is gone or late cannot be waited for; its launcher is bringing it down.
  }
}

}  // namespace accel::runtime
