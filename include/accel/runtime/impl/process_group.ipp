// ProcessGroup, the router over the transports; process_group.hpp includes it in header-only mode.
#pragma once

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "../../detail/small_tensor.hpp"
#include "../../profiling/span.hpp"
#include "../c10d_transport.hpp"
#include "../gloo_abort_handler.hpp"
#include "../group_store.hpp"
#include "../process_group.hpp"
#include "../../runtime/shared_memory_path.hpp"
#include "../tensor_layout.hpp"
#include "../wire_fallbacks.hpp"

namespace accel::runtime {

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
  const bool failing =
      std::uncaught_exceptions() > 0 || c10d_->broken() || (shm_ && shm_->broken());
  // The shared-memory path leaves once its own collectives have run (not while one fails: its
  // queue may never drain; the process's exit tells the peers then).
  c10d_->leave(calls_.issued(), failing, [&] {
    if (shm_ && !failing) shm_->leave();
  });
}

ACCEL_DECL ProcessGroup::Caller::Caller(ProcessGroup* group, std::string_view name)
    : group_(group != nullptr && group->calls_.caller().empty() ? group : nullptr) {
  if (group_ != nullptr) group_->calls_.set_caller(name);
}

ACCEL_DECL ProcessGroup::Caller::~Caller() {
  if (group_ != nullptr) group_->calls_.set_caller({});
}

ACCEL_DECL CollectiveCall ProcessGroup::check(std::string operation, const torch::Tensor& tensor) {
  return calls_(std::move(operation), tensor, *c10d_);
}

ACCEL_DECL void ProcessGroup::barrier() {
  const CollectiveCall call = check("barrier", torch::Tensor());
  const profiling::Span span(profiling::Phase::communication, "barrier",
                             static_cast<std::int64_t>(call.sequence));
  // Through shared memory when it carries the group, where the peers' other collectives meet it:
  // a rank in a barrier of Gloo's and a peer in a shared-memory collective would each wait the
  // whole timeout, neither transport seeing the pair (the stuck-collective watch runs only on
  // groups without shared memory).
  if (shm_)
    shm_->barrier(call);
  else
    c10d_->barrier(call);
}

ACCEL_DECL void ProcessGroup::allreduce(torch::Tensor& tensor, ReduceOp op) {
  check_reducible(tensor, op);
  const CollectiveCall call = check("allreduce", tensor);
  const auto span = collective_span("allreduce", call.sequence, tensor);
  if (const auto type = reducible_in_shared_memory(tensor)) {
    torch::Tensor data = tensor.contiguous();
    shm_->allreduce(data, *type, shm_reduction(op), call);
    if (!data.is_same(tensor)) tensor.copy_(data);
    return;
  }
  c10d_->allreduce(tensor, op, call);
}

ACCEL_DECL ProcessGroup::Pending ProcessGroup::allreduce_async(torch::Tensor tensor) {
  const bool carried = reducible_in_shared_memory(tensor) || wire_native(tensor);
  return allreduce_async(tensor, carried ? torch::Tensor() : to_wire(tensor));
}

ACCEL_DECL ProcessGroup::Pending ProcessGroup::allreduce_async(torch::Tensor tensor,
                                                               torch::Tensor wire) {
  const torch::Tensor& sent = wire.defined() ? wire : tensor;
  if (const auto type = reducible_in_shared_memory(sent); type && sent.is_contiguous()) {
    Pending pending{c10d_.get(), shm_.get(), check("allreduce", sent).sequence, {},
                    tensor, wire, {}};
    const auto span =
        collective_span("allreduce", pending.sequence, sent, profiling::Part::issue);
    pending.shared_memory = shm_->start_allreduce(sent, *type);
    return pending;
  }
  if (!wire_native(sent))
    accel::detail::fail("{} all-reduce is not available on this Gloo (libtorch {}); use an fp32 or "
                        "fp16 wire",
                        c10::toString(sent.scalar_type()), TORCH_VERSION);
  Pending pending{c10d_.get(), shm_.get(), check("allreduce", sent).sequence, {},
                  tensor, wire, {}};
  const auto span =
      collective_span("allreduce", pending.sequence, sent, profiling::Part::issue);
  pending.work = c10d_->start_allreduce(sent);
  return pending;
}

ACCEL_DECL std::shared_ptr<shm::Regions> ProcessGroup::share_regions(std::size_t bytes) {
  if (!shm_) return nullptr;
  const CollectiveCall call = check("share_regions", torch::Tensor());
  return shm_->map_regions(*c10d_->store(), run_token_, id_, bytes, call);
}

ACCEL_DECL shm::DataType ProcessGroup::check_in_regions(const shm::Regions* regions,
                                                         const torch::Tensor& flat) const {
  const auto* begin = static_cast<const std::byte*>(flat.data_ptr());
  const auto type = reducible_in_shared_memory(flat);
  if (regions == nullptr || !flat.is_contiguous() ||
      (type != shm::DataType::f32 && type != shm::DataType::f64) || begin < regions->mine() ||
      begin + flat.nbytes() > regions->mine() + regions->bytes())
    accel::detail::fail("internal: an all-reduce in shared regions takes a contiguous fp32 or "
                        "fp64 tensor inside this rank's region, not {} elements of {}",
                        flat.numel(), c10::toString(flat.scalar_type()));
  return *type;
}

ACCEL_DECL ProcessGroup::Pending ProcessGroup::allreduce_in_regions_async(
    std::shared_ptr<shm::Regions> regions, torch::Tensor flat, double scale) {
  const shm::DataType type = check_in_regions(regions.get(), flat);
  Pending pending{c10d_.get(), shm_.get(), check("allreduce", flat).sequence, {}, flat, {}, {}};
  const auto span = collective_span("allreduce", pending.sequence, flat, profiling::Part::issue);
  pending.shared_memory = shm_->start_allreduce_regions(std::move(regions), flat, type, scale);
  return pending;
}

ACCEL_DECL void ProcessGroup::allreduce_in_regions(shm::Regions& regions, const torch::Tensor& flat,
                                                   double scale) {
  const shm::DataType type = check_in_regions(&regions, flat);
  const CollectiveCall call = check("allreduce", flat);
  const auto span = collective_span("allreduce", call.sequence, flat);
  shm_->allreduce_regions(regions, flat, type, scale, call);
}

ACCEL_DECL ProcessGroup::RegisteredAllreduce ProcessGroup::register_allreduce(torch::Tensor flat) {
  if (!DirectGloo::can_register(flat))
    accel::detail::fail("register_allreduce takes a contiguous float or double CPU tensor, not {} "
                        "on {}",
                        c10::toString(flat.scalar_type()), flat.device().str());
  return RegisteredAllreduce(calls_, *c10d_, shm_.get(), flat);
}

ACCEL_DECL void ProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  const CollectiveCall call = check(fmt::format("broadcast(root={})", root), tensor);
  const auto span = collective_span("broadcast", call.sequence, tensor);
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
    accel::detail::fail("broadcast #{} from rank {}: the root sent {} and rank {} passed {}; every "
                        "rank must pass a tensor of the root's dtype and shape",
                        call.sequence, root, layout_text(received), rank_, layout_text(header));
  torch::Tensor body = payload.narrow(0, header.numel() * 8, payload.numel() - header.numel() * 8);
  if (tensor.numel() > 0)
    tensor.view(-1).copy_(body.view(tensor.scalar_type()).view(-1));
}

ACCEL_DECL torch::Tensor ProcessGroup::allgather(const torch::Tensor& tensor) {
  const CollectiveCall call = check("allgather", tensor);
  const auto span = collective_span("allgather", call.sequence, tensor);
  const torch::Tensor input = gather_input(tensor);
  if (!gathers_in_shared_memory(input)) return c10d_->allgather(input, call);
  std::vector<std::int64_t> shape = input.sizes().vec();
  shape[0] *= size_;
  torch::Tensor output = torch::empty(shape, input.options());
  shm_->allgather(input, output, call);
  return output;
}

ACCEL_DECL void ProcessGroup::allgather_into(torch::Tensor& output, const torch::Tensor& input) {
  const CollectiveCall call = check("allgather", input);
  const auto span = collective_span("allgather", call.sequence, input);
  check_gather_layout(output, input);
  torch::Tensor flat_output = output.view(-1);
  if (gathers_in_shared_memory(input))
    shm_->allgather(input, output, call);
  else
    c10d_->allgather_into(flat_output, input, call);
}

ACCEL_DECL ProcessGroup::PendingCollective ProcessGroup::allgather_into_async(torch::Tensor output,
                                                                              torch::Tensor input) {
  const bool in_shared_memory = gathers_in_shared_memory(input);
  if (!in_shared_memory && !c10d_->starts_allgather(input)) {
    allgather_into(output, input);  // a fallback of several steps: here and now
    return {};
  }
  PendingCollective gathering{shm_.get(), "allgather", check("allgather", input).sequence,
                              input, {}, {}};
  check_gather_layout(output, input);
  const auto span = collective_span("allgather", gathering.sequence, input,
                                            profiling::Part::issue);
  if (in_shared_memory) {
    gathering.done = shm_->start_allgather(input, output);
    return gathering;
  }
  torch::Tensor flat_output = output.view(-1);
  gathering.done = std::make_shared<Completion>();
  gathering.done->c10d = c10d_.get();
  gathering.done->started = c10d_->start_allgather_into(flat_output, input.reshape(-1));
  return gathering;
}

ACCEL_DECL ProcessGroup::PendingCollective ProcessGroup::reduce_scatter_async(
    const torch::Tensor& input, ReduceOp op, torch::Tensor into) {
  const auto type = reducible_in_shared_memory(input);
  const bool over_c10d = !type && c10d_->starts_reduce_scatter(input);
  if ((!type && !over_c10d) || !input.is_contiguous()) {
    PendingCollective done{shm_.get(), "reduce_scatter", 0, {}, {}, {}};
    done.result = reduce_scatter(input, op);  // a fallback of several steps: here and now
    return done;
  }
  check_reduce_scatter(input, op, size_);
  PendingCollective pending{shm_.get(), "reduce_scatter", check("reduce_scatter", input).sequence,
                            input, {}, {}};
  const torch::Tensor flat = input.view(-1);
  const std::int64_t chunk = flat.numel() / size_;
  if (into.defined() && (!into.is_contiguous() || into.numel() != chunk ||
                         into.scalar_type() != flat.scalar_type()))
    accel::detail::fail("reduce_scatter_async: the output ({} elements of {}) must be contiguous "
                        "and hold the chunk's {} elements of {}",
                        into.numel(), c10::toString(into.scalar_type()), chunk,
                        c10::toString(flat.scalar_type()));
  // Over c10d a chunk of its own: `into` may be this rank's slice of the input, which the
  // backend reads while it writes.
  pending.result = into.defined() && !over_c10d ? into : torch::empty({chunk}, flat.options());
  const auto span = collective_span("reduce_scatter", pending.sequence, input,
                                            profiling::Part::issue);
  if (over_c10d) {
    pending.input = flat;
    pending.done = std::make_shared<Completion>();
    pending.done->c10d = c10d_.get();
    pending.done->started = c10d_->start_reduce_scatter(pending.result, flat, op);
    return pending;
  }
  pending.done = shm_->start_reduce_scatter(flat, pending.result, *type, shm_reduction(op));
  return pending;
}

ACCEL_DECL torch::Tensor ProcessGroup::reduce_scatter(const torch::Tensor& input, ReduceOp op) {
  check_reduce_scatter(input, op, size_);
  const CollectiveCall call = check("reduce_scatter", input);
  const auto span = collective_span("reduce_scatter", call.sequence, input);
  const torch::Tensor flat = input.contiguous().view(-1);
  const auto type = reducible_in_shared_memory(flat);
  if (!type) return c10d_->reduce_scatter(flat, op, call);
  torch::Tensor result = torch::empty({input.numel() / size_}, flat.options());
  shm_->reduce_scatter(flat, result, *type, shm_reduction(op), call);  // averaged there
  return result;
}

ACCEL_DECL torch::Tensor ProcessGroup::allgather_portable(const torch::Tensor& tensor) {
  const CollectiveCall call = check("allgather", tensor);
  const auto span = collective_span("allgather", call.sequence, tensor);
  return c10d_->allgather_by_list(gather_input(tensor), call);
}

ACCEL_DECL void ProcessGroup::allgather_into_portable(torch::Tensor& output,
                                                      const torch::Tensor& input) {
  const CollectiveCall call = check("allgather", input);
  const auto span = collective_span("allgather", call.sequence, input);
  check_gather_layout(output, input);
  torch::Tensor flat_output = output.view(-1);
  c10d_->allgather_into_by_list(flat_output, input, call);
}

ACCEL_DECL torch::Tensor ProcessGroup::reduce_scatter_portable(const torch::Tensor& input,
                                                               ReduceOp op) {
  check_reduce_scatter(input, op, size_);
  const CollectiveCall call = check("reduce_scatter", input);
  const auto span = collective_span("reduce_scatter", call.sequence, input);
  return c10d_->reduce_scatter_by_alltoall(input.contiguous().view(-1), op, call);
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

ACCEL_DECL std::optional<shm::DataType> ProcessGroup::reducible_in_shared_memory(
    const torch::Tensor& t) const {
  if (!shm_) return std::nullopt;
  return shared_memory_type(t);
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
