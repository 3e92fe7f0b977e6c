// ProcessGroup, the router over the transports; process_group.hpp includes it in header-only mode.
#pragma once

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "../../detail/small_tensor.hpp"
#include "../../profiling/span.hpp"
#include "../c10d_transport.hpp"
#include "../error_line.hpp"
#include "../gloo_abort_handler.hpp"
#include "../group_store.hpp"
#include "../process_group.hpp"
#include "../../runtime/shared_memory_path.hpp"
#include "../wire_fallbacks.hpp"

namespace accel::runtime {

// The transports the group routes between (transport.hpp).
static_assert(Transport<C10dTransport>,
              "internal: C10dTransport must offer every collective the group routes (transport.hpp)");
static_assert(Transport<SharedMemoryPath>, "internal: SharedMemoryPath must offer every collective "
                                           "the group routes (transport.hpp)");

// A collective's span (profiling/span.hpp): its phase, its number in the group and its bytes.
inline profiling::Span collective_span(const char* operation, std::uint64_t sequence,
                                       const torch::Tensor& tensor,
                                       profiling::Part part = profiling::Part::whole) {
  return profiling::Span(profiling::Phase::communication, operation,
                         static_cast<std::int64_t>(sequence),
                         tensor.defined() ? static_cast<std::int64_t>(tensor.nbytes()) : 0, part);
}

ACCEL_DECL ProcessGroup::ProcessGroup(const Environment& env, GroupSettings settings)
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

ACCEL_DECL std::unique_ptr<ProcessGroup> ProcessGroup::split(std::string_view purpose, int color,
                                                             bool same_host) {
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

ACCEL_DECL ProcessGroup::~ProcessGroup() {
  const bool unwinding = std::uncaught_exceptions() > 0;
  const bool failing = unwinding || broken_ || c10d_->broken() || (shm_ && shm_->broken());
  // The shared-memory path leaves once its own collectives have run (not while one of them fails
  // or an exception unwinds: its queue may never drain; the process's exit tells the peers then).
  // A collective whose transport threw in front of it (broken_) never reached its queue: it
  // leaves then too, so that a peer waiting there fails at once, as Gloo's closed connections
  // make it fail, rather than at the timeout.
  const bool shm_drains = !unwinding && !c10d_->broken() && !(shm_ && shm_->broken());
  c10d_->leave(calls_.issued(), failing, [&] {
    if (shm_ && shm_drains) shm_->leave();
  });
}

ACCEL_DECL ProcessGroup::Caller::Caller(ProcessGroup* group, std::string_view name)
    : group_(group != nullptr && group->calls_.caller().empty() ? group : nullptr) {
  if (group_ != nullptr) group_->calls_.set_caller(name);
}

ACCEL_DECL ProcessGroup::Caller::~Caller() {
  if (group_ != nullptr) group_->calls_.set_caller({});
}

template <class T, class Run>
decltype(auto) ProcessGroup::checked(T& transport, std::string operation, const char* name,
                                     const torch::Tensor& tensor, bool started, Run&& run) {
  static_assert(Transport<T>, "internal: a group's collectives run on a Transport (transport.hpp)");
  const CollectiveCall call = calls_(std::move(operation), tensor, *c10d_);
  const auto span = collective_span(name, call.sequence, tensor,
                                    started ? profiling::Part::issue : profiling::Part::whole);
  try {
    return run(transport, call);
  } catch (const accel::Error&) {
    throw;  // named already: by the transport (its failed()) or by a check of the arguments
  } catch (const std::exception& error) {
    // The transport's own error (c10d's, Gloo's, NCCL's at the call, a test transport's): the
    // peers may be inside this collective, so the group is broken and leaves without waiting.
    broken_ = true;
    accel::detail::fail("{} failed on rank {}: {}; the transport's error is the cause, and the "
                        "group cannot be used any more: the other ranks fail in this collective "
                        "once this rank's group or process ends, or at the timeout of {} s "
                        "(Options::timeout, ACCEL_TIMEOUT)",
                        describe(call), rank_, error_line(error),
                        std::chrono::duration<double>(settings_.timeout).count());
  }
}

template <class Run>
decltype(auto) ProcessGroup::routed(CollectiveOp op, const torch::Tensor& t, bool starting,
                                    Run&& run) {
  if (shm_ && (starting ? shm_->starts(op, t) : shm_->carries(op, t))) return run(*shm_);
  return run(*c10d_);
}

template <class Run>
decltype(auto) ProcessGroup::collective(CollectiveOp op, std::string operation, const char* name,
                                        const torch::Tensor& tensor,
                                        const torch::Tensor& routed_by, Run&& run) {
  return routed(op, routed_by, /*starting=*/false, [&](auto& transport) -> decltype(auto) {
    return checked(transport, std::move(operation), name, tensor, /*started=*/false, run);
  });
}

template <class Run>
PendingCollective ProcessGroup::start(CollectiveOp op, const char* name,
                                      const torch::Tensor& tensor, Run&& run) {
  PendingCollective pending = routed(op, tensor, /*starting=*/true, [&](auto& transport) {
    return checked(transport, name, name, tensor, /*started=*/true, run);
  });
  pending.operation = name;
  return pending;
}

ACCEL_DECL bool ProcessGroup::starts(CollectiveOp op, const torch::Tensor& t) const {
  return (shm_ && shm_->starts(op, t)) || c10d_->starts(op, t);
}

// Through shared memory when it carries the group, where the peers' other collectives meet it
// (SharedMemoryPath::barrier).
ACCEL_DECL void ProcessGroup::barrier() {
  collective(CollectiveOp::barrier, "barrier", "barrier", {}, {},
             [](auto& transport, const CollectiveCall& call) { transport.barrier(call); });
}

ACCEL_DECL void ProcessGroup::allreduce(torch::Tensor& tensor, ReduceOp op) {
  check_reducible(tensor, op);
  collective(CollectiveOp::allreduce, "allreduce", "allreduce", tensor, tensor,
             [&](auto& transport, const CollectiveCall& call) {
               transport.allreduce(tensor, op, call);
             });
}

ACCEL_DECL PendingCollective ProcessGroup::allreduce_async(torch::Tensor tensor) {
  const bool carried = (shm_ && shm_->carries(CollectiveOp::allreduce, tensor)) ||
                       wire_native(tensor);
  return allreduce_async(tensor, carried ? torch::Tensor() : to_wire(tensor));
}

ACCEL_DECL PendingCollective ProcessGroup::allreduce_async(torch::Tensor tensor,
                                                           torch::Tensor wire) {
  const torch::Tensor& sent = wire.defined() ? wire : tensor;
  if (!starts(CollectiveOp::allreduce, sent))
    accel::detail::fail("{} all-reduce is not available on this Gloo (libtorch {}); use an fp32 or "
                        "fp16 wire",
                        c10::toString(sent.scalar_type()), TORCH_VERSION);
  PendingCollective pending =
      start(CollectiveOp::allreduce, "allreduce", sent,
            [&](auto& transport, const CollectiveCall& call) {
              return transport.start_allreduce(sent, call);
            });
  if (wire.defined()) pending.land_in = tensor;
  return pending;
}

ACCEL_DECL std::shared_ptr<shm::Regions> ProcessGroup::share_regions(std::size_t bytes) {
  if (!shm_) return nullptr;
  return checked(*shm_, "share_regions", "share_regions", {}, false,
                 [&](SharedMemoryPath& path, const CollectiveCall& call) {
                   return path.map_regions(*c10d_->store(), run_token_, id_, bytes, call);
                 });
}

ACCEL_DECL shm::DataType ProcessGroup::check_in_regions(const shm::Regions* regions,
                                                         const torch::Tensor& flat) const {
  const auto* begin = static_cast<const std::byte*>(flat.data_ptr());
  const auto type = shm_ ? shared_memory_type(flat) : std::nullopt;
  if (regions == nullptr || !flat.is_contiguous() ||
      (type != shm::DataType::f32 && type != shm::DataType::f64) || begin < regions->mine() ||
      begin + flat.nbytes() > regions->mine() + regions->bytes())
    accel::detail::fail("internal: an all-reduce in shared regions takes a contiguous fp32 or "
                        "fp64 tensor inside this rank's region, not {} elements of {}",
                        flat.numel(), c10::toString(flat.scalar_type()));
  return *type;
}

ACCEL_DECL PendingCollective ProcessGroup::allreduce_in_regions_async(
    std::shared_ptr<shm::Regions> regions, torch::Tensor flat, double scale) {
  const shm::DataType type = check_in_regions(regions.get(), flat);
  PendingCollective pending =
      checked(*shm_, "allreduce", "allreduce", flat, true,
              [&](SharedMemoryPath& path, const CollectiveCall& call) {
                return path.start_allreduce_regions(std::move(regions), flat, type, scale, call);
              });
  pending.operation = "allreduce";
  return pending;
}

ACCEL_DECL void ProcessGroup::allreduce_in_regions(shm::Regions& regions, const torch::Tensor& flat,
                                                   double scale) {
  const shm::DataType type = check_in_regions(&regions, flat);
  checked(*shm_, "allreduce", "allreduce", flat, false,
          [&](SharedMemoryPath& path, const CollectiveCall& call) {
            path.allreduce_regions(regions, flat, type, scale, call);
          });
}

ACCEL_DECL ProcessGroup::RegisteredAllreduce ProcessGroup::register_allreduce(torch::Tensor flat) {
  if (!DirectGloo::can_register(flat))
    accel::detail::fail("register_allreduce takes a contiguous float or double CPU tensor, not {} "
                        "on {}",
                        c10::toString(flat.scalar_type()), flat.device().str());
  return RegisteredAllreduce(*this, flat);
}

// The root's dtype and shape travel with the data (tensor_layout.hpp): a rank that passed a
// tensor of the same byte size but another dtype or shape fails instead of reading garbage.
ACCEL_DECL void ProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  collective(CollectiveOp::broadcast, fmt::format("broadcast(root={})", root), "broadcast", tensor,
             tensor, [&](auto& transport, const CollectiveCall& call) {
               transport.broadcast(tensor, root, call);
             });
}

ACCEL_DECL torch::Tensor ProcessGroup::allgather(const torch::Tensor& tensor) {
  const torch::Tensor input = gather_input(tensor);
  return collective(CollectiveOp::allgather, "allgather", "allgather", tensor, input,
                    [&](auto& transport, const CollectiveCall& call) {
                      return transport.allgather(input, call);
                    });
}

ACCEL_DECL void ProcessGroup::allgather_into(torch::Tensor& output, const torch::Tensor& input) {
  collective(CollectiveOp::allgather, "allgather", "allgather", input, input,
             [&](auto& transport, const CollectiveCall& call) {
               check_gather_layout(output, input);
               transport.allgather_into(output, input, call);
             });
}

ACCEL_DECL PendingCollective ProcessGroup::allgather_into_async(torch::Tensor output,
                                                                torch::Tensor input) {
  if (!starts(CollectiveOp::allgather, input)) {
    allgather_into(output, input);  // a fallback of several steps: here and now
    return {};
  }
  return start(CollectiveOp::allgather, "allgather", input,
               [&](auto& transport, const CollectiveCall& call) {
                 check_gather_layout(output, input);
                 return transport.start_allgather_into(output, input, call);
               });
}

ACCEL_DECL PendingCollective ProcessGroup::reduce_scatter_async(const torch::Tensor& input,
                                                                ReduceOp op, torch::Tensor into) {
  if (!starts(CollectiveOp::reduce_scatter, input)) {
    PendingCollective done;
    done.operation = "reduce_scatter";
    done.result = reduce_scatter(input, op);  // a fallback of several steps: here and now
    return done;
  }
  check_reduce_scatter(input, op, size_);
  return start(CollectiveOp::reduce_scatter, "reduce_scatter", input,
               [&](auto& transport, const CollectiveCall& call) {
                 const std::int64_t chunk = input.numel() / size_;
                 if (into.defined() && (!into.is_contiguous() || into.numel() != chunk ||
                                        into.scalar_type() != input.scalar_type()))
                   accel::detail::fail("reduce_scatter_async: the output ({} elements of {}) must "
                                       "be contiguous and hold the chunk's {} elements of {}",
                                       into.numel(), c10::toString(into.scalar_type()), chunk,
                                       c10::toString(input.scalar_type()));
                 return transport.start_reduce_scatter(input, into, op, call);
               });
}

ACCEL_DECL torch::Tensor ProcessGroup::reduce_scatter(const torch::Tensor& input, ReduceOp op) {
  check_reduce_scatter(input, op, size_);
  const torch::Tensor flat = input.contiguous().view(-1);
  return collective(CollectiveOp::reduce_scatter, "reduce_scatter", "reduce_scatter", input, flat,
                    [&](auto& transport, const CollectiveCall& call) {
                      return transport.reduce_scatter(flat, op, call);
                    });
}

ACCEL_DECL std::string ProcessGroup::broadcast_bytes(const std::string& bytes, int root) {
  torch::Tensor length = accel::detail::one_value(static_cast<std::int64_t>(bytes.size()));
  broadcast(length, root);
  torch::Tensor buffer = torch::empty({length.item<std::int64_t>()}, torch::kUInt8);
  if (rank_ == root) std::memcpy(buffer.data_ptr(), bytes.data(), bytes.size());
  broadcast(buffer, root);
  return std::string(static_cast<const char*>(buffer.data_ptr()),
                     static_cast<std::size_t>(buffer.numel()));
}

ACCEL_DECL std::vector<std::string> ProcessGroup::allgather_bytes(const std::string& bytes) {
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

ACCEL_DECL ProcessGroup::ProcessGroup(const ProcessGroup& parent, const std::string& id, int rank,
                                      int size, bool same_host)
    : rank_(rank), size_(size), local_rank_(parent.local_rank_),
      local_size_(parent.local_size_), run_token_(parent.run_token_),
      settings_(parent.settings_), calls_(parent.settings_.check_collectives) {
  join(c10::make_intrusive<c10d::PrefixStore>(id, parent.c10d_->store()), id, same_host);
}

ACCEL_DECL void ProcessGroup::join(c10::intrusive_ptr<c10d::Store> store, std::string id,
                                   bool same_host) {
  id_ = std::move(id);
  const bool shared_memory = settings_.shared_memory && same_host;
  c10d_ = std::make_unique<C10dTransport>(std::move(store), rank_, size_, same_host, settings_,
                                          /*watch_stuck=*/!shared_memory && size_ > 1);
  if (shared_memory)
    shm_ = std::make_unique<SharedMemoryPath>(*c10d_->store(), run_token_, id_, rank_, size_,
                                              settings_.timeout,
                                              [c10d = c10d_.get()] { return c10d->left_peers(); });
}

ACCEL_DECL void ProcessGroup::check_gather_layout(const torch::Tensor& output,
                                                  const torch::Tensor& input) const {
  if (!output.is_contiguous() || !input.is_contiguous() ||
      output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type())
    accel::detail::fail("allgather_into: the output ({} elements of {}) must be contiguous and "
                        "hold {} x the input's {} elements of the same dtype ({})",
                        output.numel(), c10::toString(output.scalar_type()), size_, input.numel(),
                        c10::toString(input.scalar_type()));
}

}  // namespace accel::runtime
