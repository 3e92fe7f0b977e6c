// The group of ranks and the collectives accel uses: a router over the transports. Every
// collective takes the same steps: it is numbered and, with checking on, compared across the
// ranks (collective_check.hpp); then CPU tensors go through shared memory when every rank is on
// this host (shared_memory_path.hpp, shm/), and the rest through c10d (c10d_transport.hpp):
// NCCL for CUDA tensors where the ranks train on CUDA, Gloo for everything else, with the gaps
// of a backend filled once (wire_fallbacks.hpp); a failure names the collective.
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
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/small_tensor.hpp"
#include "../detail/torch_compat.hpp"
#include "c10d_transport.hpp"
#include "collective_call.hpp"
#include "collective_check.hpp"
#include "environment.hpp"
#include "gloo_abort_handler.hpp"
#include "group_settings.hpp"
#include "group_store.hpp"
#include "pending_collective.hpp"
#include "reduce_op.hpp"
#include "registered_allreduce.hpp"
#include "shared_memory_path.hpp"
#include "tensor_layout.hpp"
#include "wire_fallbacks.hpp"

namespace accel::runtime {

class ProcessGroup {
 public:
  ProcessGroup(const Environment& env, GroupSettings settings)
      : rank_(env.process.rank), size_(env.process.world_size), settings_(settings),
        calls_(settings.check_collectives) {
    const auto rendezvous = settings.rendezvous_timeout;
    // The store, the ranks' admission and Gloo's connections all come out of this one timeout.
    const auto deadline = RendezvousClock::now() + rendezvous;
    explain_gloo_aborts();  // process-wide, installed once (gloo_abort_handler.hpp)
    // Each group of this process gets its own key space, so that a second group (a second
    // Accelerator) never reads the first one's rendezvous keys. Ranks create groups in the same
    // order, so the numbers agree across ranks.
    static int groups_created = 0;
    const int group_number = groups_created++;
    const auto store = group_store(env, group_number, deadline, rendezvous);
    local_rank_ = env.process.local_rank;
    local_size_ = env.process.local_world_size;
    run_token_ = env.store_dir.empty() ? "" : shm::run_token_of(env.store_dir);
    join(c10::make_intrusive<c10d::PrefixStore>(fmt::format("accel/group{}", group_number), store),
         fmt::format("{}", group_number), local_size_ == size_);
  }

  // A group of some of this group's ranks. Every rank calls it, in the same order, with the same
  // `purpose`; the ranks passing the same `color` form one group, in their order here.
  // `same_host`: its ranks share this host (Gloo on loopback, and shared memory unless turned
  // off). Fsdp<HybridShard> splits the job into its nodes and across them.
  std::unique_ptr<ProcessGroup> split(std::string_view purpose, int color, bool same_host) {
    const std::vector<std::string> colors = allgather_bytes(std::to_string(color));
    int sub_rank = 0, sub_size = 0;
    for (int r = 0; r < size_; ++r)
      if (colors[static_cast<std::size_t>(r)] == std::to_string(color)) {
        if (r == rank_) sub_rank = sub_size;
        ++sub_size;
      }
    const std::string id = fmt::format("{}.{}{}", id_, purpose, color);
    return std::unique_ptr<ProcessGroup>(new ProcessGroup(*this, id, sub_rank, sub_size, same_host));
  }

  // Waits, briefly, for the others to leave too (C10dTransport::leave); not at all while an
  // exception unwinds through the group's owner or after a collective failed.
  ~ProcessGroup() {
    const bool failing =
        std::uncaught_exceptions() > 0 || c10d_->broken() || (shm_ && shm_->broken());
    c10d_->leave(calls_.issued(), failing);
  }

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
    Caller(ProcessGroup* group, std::string_view name)
        : group_(group != nullptr && group->calls_.caller().empty() ? group : nullptr) {
      if (group_ != nullptr) group_->calls_.set_caller(name);
    }
    ~Caller() {
      if (group_ != nullptr) group_->calls_.set_caller({});
    }
    Caller(const Caller&) = delete;
    Caller& operator=(const Caller&) = delete;

   private:
    ProcessGroup* group_;
  };

  void barrier() { c10d_->barrier(check("barrier", torch::Tensor())); }

  // In place; mean divides the sum by the world size (Gloo has no AVG).
  void allreduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::sum) {
    check_reducible(tensor, op);
    const CollectiveCall call = check("allreduce", tensor);
    if (const auto type = reducible_in_shared_memory(tensor)) {
      torch::Tensor data = tensor.contiguous();
      shm_->allreduce(data, *type, shm_reduction(op), call);
      if (!data.is_same(tensor)) tensor.copy_(data);
      return;
    }
    c10d_->allreduce(tensor, op, call);
  }

  // Starts a sum all-reduce of a contiguous tensor and returns its handle (pending_collective.hpp).
  using Pending = PendingAllreduce;
  Pending allreduce_async(torch::Tensor tensor) {
    const bool carried = reducible_in_shared_memory(tensor) || wire_native(tensor);
    return allreduce_async(tensor, carried ? torch::Tensor() : to_wire(tensor));
  }
  // The same with the stand-in given: `wire` travels, and its sum lands in `tensor` at wait().
  Pending allreduce_async(torch::Tensor tensor, torch::Tensor wire) {
    const torch::Tensor& sent = wire.defined() ? wire : tensor;
    if (const auto type = reducible_in_shared_memory(sent); type && sent.is_contiguous()) {
      Pending pending{c10d_.get(), shm_.get(), check("allreduce", sent).sequence, {},
                      tensor, wire, {}};
      pending.shared_memory = shm_->start_allreduce(sent, *type);
      return pending;
    }
    if (!wire_native(sent))
      detail::fail("{} all-reduce is not available on this Gloo (libtorch {}); use an fp32 or "
                   "fp16 wire",
                   c10::toString(sent.scalar_type()), TORCH_VERSION);
    Pending pending{c10d_.get(), shm_.get(), check("allreduce", sent).sequence, {},
                    tensor, wire, {}};
    pending.work = c10d_->start_allreduce(sent);
    return pending;
  }

  // A sum all-reduce whose buffers are registered once, run on the calling thread: Ddp's small
  // buckets (registered_allreduce.hpp). Collective; takes what DirectGloo::can_register accepts.
  using RegisteredAllreduce = runtime::RegisteredAllreduce;
  RegisteredAllreduce register_allreduce(torch::Tensor flat) {
    if (!DirectGloo::can_register(flat))
      detail::fail("register_allreduce takes a contiguous float or double CPU tensor, not {} on {}",
                   c10::toString(flat.scalar_type()), flat.device().str());
    return RegisteredAllreduce(calls_, *c10d_, shm_.get(), flat);
  }

  void broadcast(torch::Tensor& tensor, int root = 0) {
    const CollectiveCall call = check(fmt::format("broadcast(root={})", root), tensor);
    if (tensor.is_cuda()) {
      c10d_->broadcast_checked(tensor, root, call);
      return;
    }
    // The root's dtype and shape travel with the data (no extra round trip): a rank that passed
    // a tensor of the same byte size but another dtype or shape fails instead of reading garbage.
    const torch::Tensor header = describe_layout(tensor);
    torch::Tensor payload = layout_then_bytes(header, tensor.contiguous(), rank_ == root);
    if (shm_)
      shm_->broadcast(payload, root, call);
    else
      c10d_->broadcast(payload, root, call);
    if (rank_ == root) return;
    const torch::Tensor received = payload.narrow(0, 0, header.numel() * 8).view(torch::kLong);
    if (!torch::equal(received, header))
      detail::fail("broadcast #{} from rank {}: the root sent {} and rank {} passed {}; every rank "
                   "must pass a tensor of the root's dtype and shape",
                   call.sequence, root, layout_text(received), rank_, layout_text(header));
    torch::Tensor body = payload.narrow(0, header.numel() * 8, payload.numel() - header.numel() * 8);
    if (tensor.numel() > 0)
      tensor.view(-1).copy_(body.view(tensor.scalar_type()).view(-1));
  }

  // Every rank's tensor (all of one shape), concatenated along dimension 0 in rank order; a
  // 0-dim tensor counts as shape [1].
  torch::Tensor allgather(const torch::Tensor& tensor) {
    const CollectiveCall call = check("allgather", tensor);
    const torch::Tensor input = gather_input(tensor);
    if (!gathers_in_shared_memory(input)) return c10d_->allgather(input, call);
    std::vector<std::int64_t> shape = input.sizes().vec();
    shape[0] *= size_;
    torch::Tensor output = torch::empty(shape, input.options());
    shm_->allgather(input, output, call);
    return output;
  }

  // Every rank's `input` (one contiguous tensor, the same size everywhere) written into
  // `output`, a contiguous tensor of size() x input's elements, in rank order: the sharded
  // strategies gather updated shards straight back into a flat parameter, with no extra copy of
  // the whole. `input` may alias this rank's slot of `output`.
  void allgather_into(torch::Tensor& output, const torch::Tensor& input) {
    const CollectiveCall call = check("allgather", input);
    check_gather_layout(output, input);
    torch::Tensor flat_output = output.view(-1);
    if (gathers_in_shared_memory(input))
      shm_->allgather(input, output, call);
    else
      c10d_->allgather_into(flat_output, input, call);
  }

  // A collective started on the shared-memory path's thread, so that it overlaps what this
  // thread computes next (Zero3's prefetch, Zero2's reduce-scatter of each gradient bucket during
  // backward): pending_collective.hpp.
  using PendingCollective = runtime::PendingCollective;
  PendingCollective allgather_into_async(torch::Tensor output, torch::Tensor input) {
    if (!gathers_in_shared_memory(input)) {
      allgather_into(output, input);
      return {};
    }
    PendingCollective gathering{shm_.get(), "allgather", check("allgather", input).sequence,
                                input, {}, {}};
    check_gather_layout(output, input);
    gathering.done = shm_->start_allgather(input, output);
    return gathering;
  }
  // reduce_scatter (below), started on the shared-memory path's thread where it carries `input`;
  // the chunk is `result` once wait() returns. `input` must stay unchanged until then. `into`,
  // when given (contiguous, of the chunk's size and dtype), is where the shared-memory path puts
  // the chunk, and may be this rank's chunk of `input` itself: a reduce-scatter in place,
  // without a buffer of its own.
  PendingCollective reduce_scatter_async(const torch::Tensor& input, ReduceOp op = ReduceOp::sum,
                                         torch::Tensor into = {}) {
    const auto type = reducible_in_shared_memory(input);
    if (!type || !input.is_contiguous()) {
      PendingCollective done{shm_.get(), "reduce_scatter", 0, {}, {}, {}};
      done.result = reduce_scatter(input, op);
      return done;
    }
    check_reduce_scatter(input, op, size_);
    PendingCollective pending{shm_.get(), "reduce_scatter", check("reduce_scatter", input).sequence,
                              input, {}, {}};
    const torch::Tensor flat = input.view(-1);
    const std::int64_t chunk = flat.numel() / size_;
    if (into.defined() && (!into.is_contiguous() || into.numel() != chunk ||
                           into.scalar_type() != flat.scalar_type()))
      detail::fail("reduce_scatter_async: the output ({} elements of {}) must be contiguous and "
                   "hold the chunk's {} elements of {}",
                   into.numel(), c10::toString(into.scalar_type()), chunk,
                   c10::toString(flat.scalar_type()));
    pending.result = into.defined() ? into : torch::empty({chunk}, flat.options());
    pending.done = shm_->start_reduce_scatter(flat, pending.result, *type, shm_reduction(op));
    return pending;
  }

  // input holds size() equal chunks along its flat layout; returns this rank's chunk, summed
  // over ranks (or averaged with ReduceOp::mean).
  torch::Tensor reduce_scatter(const torch::Tensor& input, ReduceOp op = ReduceOp::sum) {
    check_reduce_scatter(input, op, size_);
    const CollectiveCall call = check("reduce_scatter", input);
    const torch::Tensor flat = input.contiguous().view(-1);
    const auto type = reducible_in_shared_memory(flat);
    if (!type) return c10d_->reduce_scatter(flat, op, call);
    torch::Tensor result = torch::empty({input.numel() / size_}, flat.options());
    shm_->reduce_scatter(flat, result, *type, shm_reduction(op), call);  // averaged there
    return result;
  }

  // For tests (the distributed gap_filling test, the self-test): allgather, allgather_into and
  // reduce_scatter through c10d's portable fallbacks only (wire_fallbacks.hpp: the list
  // all-gather, the alltoall reduce-scatter, bf16 through fp32), never shared memory or a
  // backend's native op, so that both paths can be compared on any libtorch. Numbered and
  // checked as the others.
  torch::Tensor allgather_portable(const torch::Tensor& tensor) {
    const CollectiveCall call = check("allgather", tensor);
    return c10d_->allgather_by_list(gather_input(tensor), call);
  }
  void allgather_into_portable(torch::Tensor& output, const torch::Tensor& input) {
    const CollectiveCall call = check("allgather", input);
    check_gather_layout(output, input);
    torch::Tensor flat_output = output.view(-1);
    c10d_->allgather_into_by_list(flat_output, input, call);
  }
  torch::Tensor reduce_scatter_portable(const torch::Tensor& input, ReduceOp op = ReduceOp::sum) {
    check_reduce_scatter(input, op, size_);
    const CollectiveCall call = check("reduce_scatter", input);
    return c10d_->reduce_scatter_by_alltoall(input.contiguous().view(-1), op, call);
  }

  // Rank root's bytes on every rank (the others' argument is ignored).
  std::string broadcast_bytes(const std::string& bytes, int root) {
    torch::Tensor length = accel::detail::one_value(static_cast<std::int64_t>(bytes.size()));
    broadcast(length, root);
    torch::Tensor buffer = torch::empty({length.item<std::int64_t>()}, torch::kUInt8);
    if (rank_ == root) std::memcpy(buffer.data_ptr(), bytes.data(), bytes.size());
    broadcast(buffer, root);
    return std::string(static_cast<const char*>(buffer.data_ptr()),
                       static_cast<std::size_t>(buffer.numel()));
  }

  // Raw bytes from every rank, in rank order; lengths may differ (for gather_object).
  std::vector<std::string> allgather_bytes(const std::string& bytes) {
    const torch::Tensor length = accel::detail::one_value(static_cast<std::int64_t>(bytes.size()));
    const torch::Tensor lengths = allgather(length);
    const std::int64_t longest = lengths.max().item<std::int64_t>();
    // Gloo's all-gather of an empty tensor divides by zero (SIGFPE on libtorch 1.13).
    if (longest == 0) return std::vector<std::string>(static_cast<std::size_t>(size_));
    torch::Tensor padded = torch::zeros({longest}, torch::kUInt8);
    std::memcpy(padded.data_ptr(), bytes.data(), bytes.size());
    const torch::Tensor all = allgather(padded);
    std::vector<std::string> result;
    for (int r = 0; r < size_; ++r)
      result.emplace_back(static_cast<const char*>(all.data_ptr()) + r * longest,
                          static_cast<std::size_t>(lengths[r].item<std::int64_t>()));
    return result;
  }

 private:
  // A subgroup (split()): its own key space under the parent's, the parent's settings.
  ProcessGroup(const ProcessGroup& parent, const std::string& id, int rank, int size, bool same_host)
      : rank_(rank), size_(size), local_rank_(parent.local_rank_),
        local_size_(parent.local_size_), run_token_(parent.run_token_),
        settings_(parent.settings_), calls_(parent.settings_.check_collectives) {
    join(c10::make_intrusive<c10d::PrefixStore>(id, parent.c10d_->store()), id, same_host);
  }

  // The rest of a group's set-up, on its own key space `store`: Gloo's connections (and NCCL's),
  // then the shared-memory path, or else the stuck-collective watch.
  void join(c10::intrusive_ptr<c10d::Store> store, std::string id, bool same_host) {
    id_ = std::move(id);
    const bool shared_memory = settings_.shared_memory && same_host;
    c10d_ = std::make_unique<C10dTransport>(std::move(store), rank_, size_, same_host, settings_,
                                            /*watch_stuck=*/!shared_memory && size_ > 1);
    if (shared_memory)
      shm_ = std::make_unique<SharedMemoryPath>(*c10d_->store(), run_token_, id_, rank_, size_,
                                                settings_.timeout);
  }

  // Numbers the collective and, with checking on, compares it across the ranks.
  CollectiveCall check(std::string operation, const torch::Tensor& tensor) {
    return calls_(std::move(operation), tensor, *c10d_);
  }

  // The shared-memory path's type for a tensor it reduces, when the path is on.
  std::optional<shm::DataType> reducible_in_shared_memory(const torch::Tensor& t) const {
    if (!shm_) return std::nullopt;
    return shared_memory_type(t);
  }
  // All-gather and broadcast copy bytes: any contiguous CPU tensor.
  bool gathers_in_shared_memory(const torch::Tensor& t) const {
    return shm_ && t.device().is_cpu() && t.is_contiguous();
  }
  void check_gather_layout(const torch::Tensor& output, const torch::Tensor& input) const {
    if (!output.is_contiguous() || !input.is_contiguous() ||
        output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type())
      detail::fail("allgather_into: the output ({} elements of {}) must be contiguous and hold "
                   "{} x the input's {} elements of the same dtype ({})",
                   output.numel(), c10::toString(output.scalar_type()), size_, input.numel(),
                   c10::toString(input.scalar_type()));
  }
  // What allgather sends: a 0-dim tensor as shape [1], contiguous.
  static torch::Tensor gather_input(const torch::Tensor& t) {
    return t.dim() == 0 ? t.reshape({1}) : t.contiguous();
  }

  int rank_;
  int size_;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string run_token_;  // for shared-memory segment names: the launch's, or empty
  std::string id_;         // this group's among the job's: "0", a subgroup "0.node1"
  GroupSettings settings_;
  CollectiveCheck calls_;  // numbers and checks every collective; the Caller's name
  std::unique_ptr<C10dTransport> c10d_;
  // Last, so that it goes first: its thread stops before the rest of the group.
  std::unique_ptr<SharedMemoryPath> shm_;
};

}  // namespace accel::runtime
