// The group of ranks and the collectives accel uses, over c10d: Gloo for CPU tensors, and NCCL
// for CUDA tensors where the ranks train on CUDA (nccl.hpp). Every gap of a
// backend is filled here, once, for every strategy:
//   - reduce-scatter as alltoall plus a local sum: each rank sends and receives (N-1)/N of the
//     data, like a ring (PyTorch's own fallback, allreduce then slice, moves twice that);
//   - all-gather into one flat tensor as a list all-gather plus a concatenation;
//   - bf16 on the wire through fp32 where Gloo lacks bf16;
//   - CPU tensors through shared memory when every rank is on this host (shared_memory_path.hpp,
//     shm/transport.hpp): memory bandwidth instead of TCP over loopback.
// With collective checking on, the ranks first compare a fingerprint of each collective
// (operation, sequence number, dtype, shape); a mismatch fails on every rank, naming what each
// rank called, instead of hanging or corrupting memory.
//
// Longer than accel's headers should be because it is one class, and every collective passes
// through the same steps (numbering and checking the call, choosing shared memory, NCCL or Gloo,
// waiting, naming a failure) that would have to be public to live elsewhere; what is not the
// class's own is beside it (admission.hpp, tcp_store.hpp, stuck_collective.hpp, direct_gloo.hpp,
// shared_memory_path.hpp). The next split is the wire-format helpers (layout headers, the
// alltoall reduce-scatter) into a header of their own.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <netdb.h>
#include <optional>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <exception>
#include <gloo/common/logging.h>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/small_tensor.hpp"
#include "../detail/torch_compat.hpp"
#include "admission.hpp"
#include "direct_gloo.hpp"
#include "error_line.hpp"
#include "failure_record.hpp"
#include "process.hpp"
#include "environment.hpp"
#include "nccl.hpp"
#include "shared_memory_path.hpp"
#include "store_text.hpp"
#include "stuck_collective.hpp"

namespace accel::runtime {

enum class ReduceOp { sum, mean, max, min };

inline std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    default: return "sum";
  }
}

// A mean of integers would round toward zero: refused, on one process as on several.
inline void check_reducible(const torch::Tensor& tensor, ReduceOp op) {
  if (op == ReduceOp::mean && !c10::isFloatingType(tensor.scalar_type()))
    detail::fail("a mean over the ranks of a {} tensor would round toward zero; reduce a "
                 "floating-point tensor (tensor.to(torch::kFloat)) or use ReduceOp::sum",
                 c10::toString(tensor.scalar_type()));
}

// How long the group may wait, and whether it checks collectives (accel::Options documents
// each; the environment overrides them: with_environment).
struct GroupSettings {
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(5);
  bool check_collectives = false;
  bool shared_memory = true;
  // The ranks' CUDA device when they train on CUDA: CUDA tensors then travel over NCCL.
  std::optional<c10::DeviceIndex> cuda_device = std::nullopt;
};

// A duration in seconds from the environment (fractions allowed), or `fallback` when unset.
inline std::chrono::milliseconds env_seconds(const char* name, std::chrono::milliseconds fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(raw, &end);
  if (end == raw || *end != '\0' || !(seconds > 0) || seconds > 1e9)
    detail::fail("{}='{}' is not a positive number of seconds; set it to, for example, 600, or "
                 "unset it",
                 name, raw);
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
}

// ACCEL_TIMEOUT and ACCEL_RENDEZVOUS_TIMEOUT (seconds) replace the timeouts, and
// ACCEL_CHECK_COLLECTIVES=1 turns checking on; timeouts must be positive.
inline GroupSettings with_environment(GroupSettings settings) {
  settings.timeout = env_seconds("ACCEL_TIMEOUT", settings.timeout);
  settings.rendezvous_timeout = env_seconds("ACCEL_RENDEZVOUS_TIMEOUT", settings.rendezvous_timeout);
  settings.check_collectives = settings.check_collectives || env_int("ACCEL_CHECK_COLLECTIVES", 0) != 0;
  settings.shared_memory = settings.shared_memory && env_int("ACCEL_SHARED_MEMORY", 1) != 0;
  if (settings.timeout.count() <= 0)
    detail::fail("Options::timeout is {} ms; it must be positive (the default is 30 minutes; "
                 "ACCEL_TIMEOUT=<seconds> sets it from the environment)",
                 settings.timeout.count());
  if (settings.rendezvous_timeout.count() <= 0)
    detail::fail("Options::rendezvous_timeout is {} ms; it must be positive (the default is 5 "
                 "minutes; ACCEL_RENDEZVOUS_TIMEOUT=<seconds> sets it from the environment)",
                 settings.rendezvous_timeout.count());
  return settings;
}

// The host name MASTER_ADDR must resolve, or the rendezvous would retry until its timeout.
inline void require_resolvable(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (status != 0)
    detail::fail("MASTER_ADDR={} (MASTER_PORT={}) does not resolve: {}; set MASTER_ADDR to rank "
                 "0's host name or IP address",
                 host, port, gai_strerror(status));
  freeaddrinfo(found);
}

// Gloo reports some errors from its own threads (a message of the wrong size: ranks that passed
// tensors of different dtypes or sizes to one collective), where nothing can catch them and the
// process ends through std::terminate. Say what that means before the default handler aborts.
inline void explain_gloo_aborts() {
  static const std::terminate_handler previous = std::set_terminate([] {
    try {
      if (const auto error = std::current_exception()) std::rethrow_exception(error);
    } catch (const gloo::EnforceNotMet& error) {
      fmt::print(stderr,
                 "accel: Gloo stopped this process: {}\naccel: the ranks most likely passed "
                 "tensors of different dtypes or sizes to the same collective; every rank must "
                 "pass the same; Options::check_collectives (ACCEL_CHECK_COLLECTIVES=1) names the "
                 "mismatched calls\n",
                 error.what());
    } catch (...) {
    }
    if (previous != nullptr) previous();
    std::abort();
  });
}

class ProcessGroup {
 public:
  ProcessGroup(const Environment& env, GroupSettings settings)
      : rank_(env.process.rank), size_(env.process.world_size),
        check_(settings.check_collectives), timeout_(settings.timeout) {
    const auto rendezvous = settings.rendezvous_timeout;
    // The store, the ranks' admission and Gloo's connections all come out of this one timeout.
    const auto deadline = RendezvousClock::now() + rendezvous;
    explain_gloo_aborts();
    // Each group of this process gets its own key space, so that a second group (a second
    // Accelerator) never reads the first one's rendezvous keys. Ranks create groups in the same
    // order, so the numbers agree across ranks.
    static int groups_created = 0;
    const int group_number = groups_created++;
    if (!env.store_dir.empty()) {
      // A folder only this user can read (accel-launch makes it 0700): no socket is opened.
      // One file per group: a FileStore deletes its file when the last of its users closes it,
      // which could otherwise remove the next group's keys while a slower rank leaves this one.
      store_ = c10::make_intrusive<c10d::FileStore>(
          fmt::format("{}/store.{}", env.store_dir, group_number), size_);
      // Nobody else can reach the folder; the admission still bounds the wait by the timeout.
      Admission(*store_, {env.run_id, size_}, rank_,
                {fmt::format("the store folder {}", env.store_dir),
                 "start every rank of a job with the same ACCEL_STORE_DIR"},
                deadline, rendezvous)
          .run();
    } else {
      store_ = tcp_store(env, deadline, rendezvous);
    }
    local_rank_ = env.process.local_rank;
    local_size_ = env.process.local_world_size;
    run_token_ = env.store_dir.empty() ? "" : shm::run_token_of(env.store_dir);
    join(c10::make_intrusive<c10d::PrefixStore>(fmt::format("accel/group{}", group_number), store_),
         fmt::format("{}", group_number), local_size_ == size_, settings);
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

  int local_rank() const { return local_rank_; }
  // Ranks on this node (LOCAL_WORLD_SIZE).
  int local_size() const { return local_size_; }

 private:
  // The rest of a group's set-up, on its own key space `store`: Gloo's connections, then the
  // shared-memory path.
  void join(c10::intrusive_ptr<c10d::Store> store, std::string id, bool same_host,
            GroupSettings settings) {
    id_ = std::move(id);
    settings_ = settings;
    store_ = std::move(store);
    const auto rendezvous = settings.rendezvous_timeout;
    // The rendezvous (the store's keys and Gloo's connections) waits for ranks still starting;
    // the collectives after it wait for ranks still computing: two timeouts.
    store_->setTimeout(rendezvous);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout_);
    // One host: keep Gloo's connections on loopback. Several: the interface GLOO_SOCKET_IFNAME
    // names (as in PyTorch), else the one this host name resolves to.
    device_ = same_host ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                        : gloo_device_for_nodes();
    options->devices.push_back(device_);
    try {
      backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank_, size_, options);
    } catch (const std::exception& error) {
      detail::fail("rank {} of {}: the ranks did not all meet within the rendezvous timeout of "
                   "{} s (Options::rendezvous_timeout, ACCEL_RENDEZVOUS_TIMEOUT); is every rank "
                   "started, with the same WORLD_SIZE? {}",
                   rank_, size_, seconds(rendezvous), error_line(error));
    }
    store_->setTimeout(timeout_);
#if defined(USE_C10D_NCCL)  // without it, join_group() refuses CUDA ranks before this
    if (settings.cuda_device)
      cuda_backend_ = make_nccl_backend(store_, rank_, size_, *settings.cuda_device, timeout_);
#endif
    if (settings.shared_memory && same_host)
      shm_ = std::make_unique<SharedMemoryPath>(*store_, run_token_, id_, rank_, size_, timeout_);
    else if (size_ > 1)
      stuck_watch_ = std::make_unique<StuckCollectiveWatch>(store_, rank_, size_);
  }

  // The job's TCPStore at MASTER_ADDR:MASTER_PORT, made by the process's first group there (rank
  // 0 serves it) and kept for the later ones (a second Accelerator), each under its own prefix:
  // were each group to make its own, rank 0 would close the first one's server while the other
  // ranks may already be connecting to it for the next. Anyone can reach the port: the ranks
  // are admitted by their run's identity when the store is made (admission.hpp).
  c10::intrusive_ptr<c10d::Store> tcp_store(const Environment& env,
                                            RendezvousClock::time_point deadline,
                                            std::chrono::milliseconds rendezvous) const {
    static std::mutex mutex;
    static std::map<std::string, c10::intrusive_ptr<c10d::Store>> stores;
    const std::scoped_lock lock(mutex);
    auto& store = stores[fmt::format("{}:{}", env.master_addr, env.master_port)];
    if (store) return store;
    require_resolvable(env.master_addr, env.master_port);
    auto made = make_tcp_store(env, rank_, size_, deadline, rendezvous);  // tcp_store.hpp
    Admission(*made, {env.run_id, size_}, rank_,
              {fmt::format("the rendezvous at MASTER_ADDR={} MASTER_PORT={}", env.master_addr,
                           env.master_port),
               "give each job its own MASTER_PORT"},
              deadline, rendezvous)
        .run();
    store = std::move(made);
    return store;
  }

  // A subgroup (split()): its own key space under the parent's, the parent's settings.
  ProcessGroup(const ProcessGroup& parent, const std::string& id, int rank, int size, bool same_host)
      : rank_(rank), size_(size), check_(parent.check_), timeout_(parent.timeout_),
        local_rank_(parent.local_rank_), local_size_(parent.local_size_),
        run_token_(parent.run_token_) {
    join(c10::make_intrusive<c10d::PrefixStore>(id, parent.store_), id, same_host, parent.settings_);
  }

 public:
  static std::shared_ptr<::gloo::transport::Device> gloo_device_for_nodes() {
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

  // Gloo fails a peer's pending receive when this side closes its connections, so a rank that
  // finished first waits, briefly, for the others to reach here too (through the store, not
  // Gloo): long enough for the last collective's final bytes to arrive everywhere, short enough
  // that peers stuck in a collective this rank never joins learn of it within seconds (closing
  // the connections fails their collective at once). No wait at all while an exception unwinds
  // through the group's owner or after a collective failed: the group is broken then anyway.
  // (An error the program caught still waits: its peers may be finishing the last collective,
  // as when every rank raised the same error.)
  ~ProcessGroup() {
    const bool failing = std::uncaught_exceptions() > 0 || broken_;
    try {
      store_->set(finished_key(rank_), store_bytes(std::to_string(sequence_)));
      if (failing) return;
      std::vector<std::string> keys;
      for (int r = 0; r < size_; ++r) keys.push_back(finished_key(r));
      store_->wait(keys, std::min<std::chrono::milliseconds>(timeout_, teardown_wait));
    } catch (...) {
      // A peer that is gone or late cannot be waited for; its launcher is bringing it down.
    }
  }
  static constexpr std::chrono::milliseconds teardown_wait = std::chrono::seconds(3);

  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Whether CPU tensors travel through shared memory (every rank on this host, not turned off).
  bool uses_shared_memory() const { return shm_ != nullptr; }
  std::uint64_t collectives_issued() const { return sequence_; }

  // Names the library call whose collectives follow, for as long as it lives ("save_state"):
  // errors and the stuck-collective watch then say "allgather #12 (Long, shape 1) in
  // save_state". The outermost call names them. `group` may be null (one process).
  class Caller {
   public:
    Caller(ProcessGroup* group, std::string_view name)
        : group_(group != nullptr && group->caller_.empty() ? group : nullptr) {
      if (group_ != nullptr) group_->caller_ = name;
    }
    ~Caller() {
      if (group_ != nullptr) group_->caller_ = {};
    }
    Caller(const Caller&) = delete;
    Caller& operator=(const Caller&) = delete;

   private:
    ProcessGroup* group_;
  };

  void barrier() {
    await(backend_->barrier(), check("barrier", torch::Tensor()));
  }

  // In place; mean divides the sum by the world size (Gloo has no AVG).
  void allreduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::sum) {
    check_reducible(tensor, op);
    const Call call = check("allreduce", tensor);
    if (const auto type = reducible_in_shared_memory(tensor)) {
      torch::Tensor data = tensor.contiguous();
      through_shared_memory(call, [&](shm::Transport& transport) {
        transport.allreduce(data.data_ptr(), static_cast<std::size_t>(data.numel()), *type,
                            to_shm(op));
      });
      if (!data.is_same(tensor)) tensor.copy_(data);
      return;
    }
    on_wire(tensor, [&](torch::Tensor& wire) {
      std::vector<torch::Tensor> list{wire};
      c10d::AllreduceOptions options;
      options.reduceOp = to_c10d(op);
      await(backend_for(wire).allreduce(list, options), call);
    });
    if (op == ReduceOp::mean) tensor.div_(size_);
  }

  // Starts a sum all-reduce of a contiguous tensor and returns its handle; wait() on it, then
  // read the tensor (or the wire copy returned alongside where the dtype needed one).
  struct Pending {
    ProcessGroup* group = nullptr;
    std::uint64_t sequence = 0;
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor tensor;  // the tensor the result lands in
    torch::Tensor wire;    // its fp32 stand-in on a wire without the dtype, else undefined
    std::shared_future<void> shared_memory;  // instead of `work` on the shared-memory path
    void wait() {
      const Call call{"allreduce", sequence, wire.defined() ? wire : tensor};
      if (shared_memory.valid()) {
        try {
          shared_memory.get();
        } catch (const std::exception& error) {
          group->failed_in_shared_memory(call, error);
        }
      } else {
        group->await(work, call);
      }
      if (wire.defined()) tensor.copy_(wire);
    }
  };
  Pending allreduce_async(torch::Tensor tensor) {
    const bool carried = reducible_in_shared_memory(tensor) || wire_native(tensor);
    return allreduce_async(tensor, carried ? torch::Tensor() : to_wire(tensor));
  }
  // The same with the stand-in given: `wire` travels, and its sum lands in `tensor` at wait().
  Pending allreduce_async(torch::Tensor tensor, torch::Tensor wire) {
    const torch::Tensor& sent = wire.defined() ? wire : tensor;
    if (const auto type = reducible_in_shared_memory(sent); type && sent.is_contiguous()) {
      Pending pending{this, check("allreduce", sent).sequence, {}, tensor, wire, {}};
      torch::Tensor data = sent;  // the task keeps the storage alive
      pending.shared_memory = shm_->submit([data, type = *type](shm::Transport& transport) {
        transport.allreduce(data.data_ptr(), static_cast<std::size_t>(data.numel()), type,
                            shm::Reduction::sum);
      });
      return pending;
    }
    if (!wire_native(sent))
      detail::fail("{} all-reduce is not available on this Gloo (libtorch {}); use an fp32 or "
                   "fp16 wire",
                   c10::toString(sent.scalar_type()), TORCH_VERSION);
    Pending pending{this, check("allreduce", sent).sequence, {}, tensor, wire, {}};
    std::vector<torch::Tensor> list{sent};
    pending.work = backend_for(sent).allreduce(list);
    return pending;
  }

  // A sum all-reduce of one tensor whose buffers are registered with Gloo once and which then
  // runs on the calling thread (direct_gloo.hpp): the fast path for small, reused tensors such
  // as gradient buckets. Registering is collective; run() blocks until every rank's sum is in.
  class RegisteredAllreduce {
   public:
    void run() {
      const Call call = group_->check("allreduce", flat_);
      if (!ring_) {  // the group carries it through shared memory
        group_->through_shared_memory(call, [&](shm::Transport& transport) {
          transport.allreduce(flat_.data_ptr(), static_cast<std::size_t>(flat_.numel()),
                              *shared_memory_type(flat_), shm::Reduction::sum);
        });
        return;
      }
      try {
        const StuckCollectiveWatch::Waiting waiting(group_->stuck_watch_.get(), call.sequence,
                                                    [&call] { return describe(call); });
        ring_->run();
      } catch (const std::exception& error) {
        group_->failed(call, error);
      }
    }

   private:
    friend class ProcessGroup;
    ProcessGroup* group_ = nullptr;
    torch::Tensor flat_;
    std::unique_ptr<gloo::Algorithm> ring_;
  };
  // Takes what DirectGloo::can_register accepts.
  RegisteredAllreduce register_allreduce(torch::Tensor flat) {
    if (!DirectGloo::can_register(flat))
      detail::fail("register_allreduce takes a contiguous float or double CPU tensor, not {} on {}",
                   c10::toString(flat.scalar_type()), flat.device().str());
    RegisteredAllreduce registered;
    registered.group_ = this;
    registered.flat_ = flat;
    if (shm_) return registered;  // faster still through shared memory: run() goes there
    // Its own key space and connections: c10d's never see these messages.
    if (!direct_)
      direct_ = std::make_unique<DirectGloo>(
          c10::make_intrusive<c10d::PrefixStore>("accel/direct", store_), rank_, size_, device_,
          timeout_);
    registered.ring_ = direct_->ring_allreduce(registered.flat_);
    return registered;
  }

  void broadcast(torch::Tensor& tensor, int root = 0) {
    const Call call = check(fmt::format("broadcast(root={})", root), tensor);
    if (tensor.is_cuda()) {
      broadcast_on_device(tensor, root, call);
      return;
    }
    // The root's dtype and shape travel with the data (no extra round trip): a rank that passed
    // a tensor of the same byte size but another dtype or shape fails instead of reading garbage.
    const torch::Tensor header = describe_layout(tensor);
    const torch::Tensor data = tensor.contiguous();
    torch::Tensor payload = torch::empty({header.numel() * 8 + data.numel() * data.element_size()},
                                         torch::kUInt8);
    std::memcpy(payload.data_ptr(), header.data_ptr(), static_cast<std::size_t>(header.numel() * 8));
    if (rank_ == root)
      std::memcpy(payload.data_ptr<std::uint8_t>() + header.numel() * 8, data.data_ptr(),
                  static_cast<std::size_t>(data.numel() * data.element_size()));
    if (shm_) {
      through_shared_memory(call, [&](shm::Transport& transport) {
        transport.broadcast(payload.data_ptr(), static_cast<std::size_t>(payload.numel()), root);
      });
    } else {
      std::vector<torch::Tensor> list{payload};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      await(backend_->broadcast(list, options), call);
    }
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
  torch::Tensor allgather(const torch::Tensor& tensor, bool native = true) {
    const Call call = check("allgather", tensor);
    const torch::Tensor input = tensor.dim() == 0 ? tensor.reshape({1}) : tensor.contiguous();
    std::vector<std::int64_t> shape = input.sizes().vec();
    shape[0] *= size_;
    if (native && gathers_in_shared_memory(input)) {
      torch::Tensor output = torch::empty(shape, input.options());
      through_shared_memory(call, [&](shm::Transport& transport) {
        transport.allgather(input.data_ptr(), output.data_ptr(), byte_size(input));
      });
      return output;
    }
    if (native && has_allgather_base(input) && wire_native(input)) {
      torch::Tensor output = torch::empty(shape, input.options());
      torch::Tensor in = input;
      await(backend_for(input)._allgather_base(output, in), call);
      return output;
    }
    // Fallback: list all-gather, then one concatenation.
    std::vector<torch::Tensor> inputs{to_wire(input)};
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(torch::empty_like(inputs[0]));
    await(backend_for(input).allgather(outputs, inputs), call);
    return torch::cat(outputs[0], 0).to(input.scalar_type());
  }

  // Every rank's `input` (one contiguous tensor, the same size everywhere) written into
  // `output`, a contiguous tensor of size() x input's elements, in rank order: the sharded
  // strategies gather updated shards straight back into a flat parameter, with no extra copy of
  // the whole. `input` may alias this rank's slot of `output`. native = false forces the
  // fallback (for tests).
  void allgather_into(torch::Tensor& output, const torch::Tensor& input, bool native = true) {
    const Call call = check("allgather", input);
    check_gather_layout(output, input);
    torch::Tensor flat_output = output.view(-1);
    if (native && gathers_in_shared_memory(input)) {
      through_shared_memory(call, [&](shm::Transport& transport) {
        transport.allgather(input.data_ptr(), output.data_ptr(), byte_size(input));
      });
      return;
    }
    if (native && has_allgather_base(input) && wire_native(input)) {
      // A copy of the input: the native op may write this rank's slot while reading the input.
      torch::Tensor in = input.reshape(-1).clone();
      await(backend_for(input)._allgather_base(flat_output, in), call);
      return;
    }
    // Gloo's list all-gather gathers into a buffer of its own and then copies each rank's part
    // into the list's tensors, which here are views of `output`. Piece by piece, so that its
    // buffer stays small (fallback_piece) whatever the size of a flat parameter.
    const torch::Tensor whole = to_wire(input.reshape(-1));
    const bool same_dtype = wire_native(input);
    const std::int64_t n = input.numel();
    for (std::int64_t begin = 0; begin < n; begin += fallback_piece) {
      const std::int64_t length = std::min(fallback_piece, n - begin);
      std::vector<torch::Tensor> inputs{whole.narrow(0, begin, length)};
      std::vector<std::vector<torch::Tensor>> outputs(1);
      for (int r = 0; r < size_; ++r)
        outputs[0].push_back(same_dtype ? flat_output.narrow(0, r * n + begin, length)
                                        : torch::empty_like(inputs[0]));
      await(backend_for(input).allgather(outputs, inputs), call);
      if (!same_dtype)
        for (int r = 0; r < size_; ++r)
          flat_output.narrow(0, r * n + begin, length).copy_(outputs[0][r]);
    }
  }

  // A collective started on the shared-memory path's thread, so that it overlaps what this
  // thread computes next (Zero3's prefetch, Zero2's reduce-scatter of each gradient bucket during
  // backward); wait() before reading its result or freeing its tensors. Where shared memory does
  // not carry it, it ran here and now, and wait() returns at once. Collectives issued after it
  // run after it, as always.
  struct PendingCollective {
    ProcessGroup* group = nullptr;
    const char* operation = "";
    std::uint64_t sequence = 0;
    torch::Tensor input;
    torch::Tensor result;  // reduce_scatter_async's chunk; undefined for allgather_into_async
    std::shared_future<void> done;
    bool pending() const { return done.valid(); }
    void wait() {
      if (!done.valid()) return;
      const std::shared_future<void> finished = std::move(done);
      done = {};
      try {
        finished.get();
      } catch (const std::exception& error) {
        group->failed_in_shared_memory(Call{operation, sequence, input}, error);
      }
    }
  };
  PendingCollective allgather_into_async(torch::Tensor output, torch::Tensor input) {
    if (!gathers_in_shared_memory(input)) {
      allgather_into(output, input);
      return {};
    }
    PendingCollective gathering{this, "allgather", check("allgather", input).sequence, input, {}, {}};
    check_gather_layout(output, input);
    gathering.done = shm_->submit([output, input](shm::Transport& transport) {
      transport.allgather(input.data_ptr(), output.data_ptr(), byte_size(input));
    });
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
      PendingCollective done{this, "reduce_scatter", 0, {}, {}, {}};
      done.result = reduce_scatter(input, op);
      return done;
    }
    check_reduce_scatter(input, op);
    PendingCollective pending{this, "reduce_scatter", check("reduce_scatter", input).sequence,
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
    pending.done = shm_->submit([flat, result = pending.result, chunk, type = *type,
                                 reduction = to_shm(op)](shm::Transport& transport) {
      transport.reduce_scatter(flat.data_ptr(), result.data_ptr(), static_cast<std::size_t>(chunk),
                               type, reduction);
    });
    return pending;
  }

  // input holds size() equal chunks along its flat layout; returns this rank's chunk, summed
  // over ranks (or averaged with ReduceOp::mean).
  torch::Tensor reduce_scatter(const torch::Tensor& input, ReduceOp op = ReduceOp::sum,
                               bool native = true) {
    check_reduce_scatter(input, op);
    const Call call = check("reduce_scatter", input);
    const std::int64_t chunk = input.numel() / size_;
    torch::Tensor flat = input.contiguous().view(-1);
    torch::Tensor result;
    if (const auto type = reducible_in_shared_memory(flat); native && type) {
      result = torch::empty({chunk}, flat.options());
      through_shared_memory(call, [&](shm::Transport& transport) {
        transport.reduce_scatter(flat.data_ptr(), result.data_ptr(),
                                 static_cast<std::size_t>(chunk), *type, to_shm(op));
      });
      return result;  // the transport averaged already
    } else if (native && has_reduce_scatter_base(flat) && wire_native(flat)) {
      result = torch::empty({chunk}, flat.options());
      c10d::ReduceScatterOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      await(backend_for(flat)._reduce_scatter_base(result, flat, options), call);
    } else {
      // alltoall: chunk j goes to rank j, so rank r receives every rank's chunk r; summing them
      // locally finishes the reduce-scatter. In fp32 where the wire lacks bf16. Piece by piece
      // (the same part of every chunk at a time), so that what is sent and received at once
      // stays small (fallback_piece per rank) whatever the size of a flat gradient.
      const torch::Tensor chunks = flat.view({size_, chunk});
      result = torch::empty({chunk}, flat.options());
      std::vector<std::int64_t> equal_split;
      for (std::int64_t begin = 0; begin < chunk; begin += fallback_piece) {
        const std::int64_t length = std::min(fallback_piece, chunk - begin);
        torch::Tensor wire = to_wire(chunks.narrow(1, begin, length).contiguous());
        torch::Tensor received = torch::empty_like(wire);
        await(backend_for(wire).alltoall_base(received, wire, equal_split, equal_split), call);
        result.narrow(0, begin, length).copy_(received.view({size_, length}).sum(0));
      }
    }
    if (op == ReduceOp::mean) result.div_(size_);
    return result;
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
  // Elements per rank that the reduce-scatter and all-gather fallbacks move at once (16 MiB of
  // fp32): their temporary buffers are size() times this, not size() times the whole input.
  static constexpr std::int64_t fallback_piece = std::int64_t{4} << 20;

  // The shared-memory path's type for a tensor it reduces, when the path is on.
  std::optional<shm::DataType> reducible_in_shared_memory(const torch::Tensor& t) const {
    if (!shm_) return std::nullopt;
    return shared_memory_type(t);
  }
  // All-gather and broadcast copy bytes: any contiguous CPU tensor.
  bool gathers_in_shared_memory(const torch::Tensor& t) const {
    return shm_ && t.device().is_cpu() && t.is_contiguous();
  }
  void check_reduce_scatter(const torch::Tensor& input, ReduceOp op) const {
    if (input.numel() % size_ != 0)
      detail::fail("reduce_scatter: {} elements do not split into {} equal chunks; pad the input "
                   "to a multiple of the world size",
                   input.numel(), size_);
    if (op != ReduceOp::sum && op != ReduceOp::mean)
      detail::fail("reduce_scatter supports sum and mean, not max or min");
  }
  void check_gather_layout(const torch::Tensor& output, const torch::Tensor& input) const {
    if (!output.is_contiguous() || !input.is_contiguous() ||
        output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type())
      detail::fail("allgather_into: the output ({} elements of {}) must be contiguous and hold "
                   "{} x the input's {} elements of the same dtype ({})",
                   output.numel(), c10::toString(output.scalar_type()), size_, input.numel(),
                   c10::toString(input.scalar_type()));
  }
  static std::size_t byte_size(const torch::Tensor& t) {
    return static_cast<std::size_t>(t.numel()) * t.element_size();
  }
  static shm::Reduction to_shm(ReduceOp op) {
    switch (op) {
      case ReduceOp::mean: return shm::Reduction::mean;
      case ReduceOp::max: return shm::Reduction::max;
      case ReduceOp::min: return shm::Reduction::min;
      default: return shm::Reduction::sum;
    }
  }
  static c10d::ReduceOp to_c10d(ReduceOp op) {
    switch (op) {
      case ReduceOp::max: return c10d::ReduceOp::MAX;
      case ReduceOp::min: return c10d::ReduceOp::MIN;
      default: return c10d::ReduceOp::SUM;
    }
  }

  // NCCL carries every dtype accel reduces; Gloo lacks bf16 before 2.x.
  static bool wire_native(const torch::Tensor& t) {
    return t.is_cuda() || t.scalar_type() != torch::kBFloat16 || detail::gloo_has_bf16;
  }
  static bool has_allgather_base(const torch::Tensor& t) {
    return t.is_cuda() || detail::gloo_has_allgather_base;
  }
  static bool has_reduce_scatter_base(const torch::Tensor& t) {
    return t.is_cuda() || detail::gloo_has_reduce_scatter_base;
  }

  // The backend that carries `t`: NCCL for a CUDA tensor, Gloo for the rest.
  detail::CommBackend& backend_for(const torch::Tensor& t) {
    if (!t.is_cuda()) return *backend_;
    if (!cuda_backend_)
      detail::fail("rank {}: a collective on a tensor on {} in a group of ranks that train on the "
                   "CPU (no NCCL group); move the tensor to the CPU first, or train on CUDA",
                   rank_, t.device().str());
    return *cuda_backend_;
  }
  static torch::Tensor to_wire(const torch::Tensor& t) {
    return wire_native(t) ? t : t.to(torch::kFloat);
  }

  // Runs a collective on `tensor`, through an fp32 copy where the wire lacks its dtype.
  template <class Collective>
  void on_wire(torch::Tensor& tensor, Collective&& collective) {
    if (wire_native(tensor) && tensor.is_contiguous()) {
      collective(tensor);
      return;
    }
    torch::Tensor wire = to_wire(tensor).contiguous();
    collective(wire);
    tensor.copy_(wire);
  }

  // One collective as the errors name it: "allreduce #12 (Float, shape 4x5)", with " in
  // save_state" where a Caller named the library call that issued it.
  struct Call {
    std::string operation;
    std::uint64_t sequence = 0;
    torch::Tensor tensor;
    std::string_view caller = {};
  };
  static std::string describe(const Call& call) {
    const std::string in = call.caller.empty() ? "" : fmt::format(" in {}", call.caller);
    if (!call.tensor.defined()) return fmt::format("{} #{}{}", call.operation, call.sequence, in);
    return fmt::format("{} #{} ({}, shape {}){}", call.operation, call.sequence,
                       c10::toString(call.tensor.scalar_type()),
                       fmt::join(call.tensor.sizes(), "x"), in);
  }

  // Numbers this collective (every rank counts the same way) and, with checking on, compares it
  // across ranks: every rank publishes what it is about to call, the ranks compare hashes (one
  // small all-gather that always matches), and on a mismatch every rank reads what each rank
  // called and fails naming them.
  Call check(std::string operation, const torch::Tensor& tensor) {
    Call call{std::move(operation), sequence_, tensor, caller_};
    if (checking_) return call;  // the fingerprint's own all-gather
    ++sequence_;
    if (!check_) return call;
    const std::string description =
        tensor.defined() ? fmt::format("{} #{} dtype={} shape={}", call.operation, call.sequence,
                                       c10::toString(tensor.scalar_type()),
                                       fmt::join(tensor.sizes(), "x"))
                         : fmt::format("{} #{}", call.operation, call.sequence);
    const auto key = [&](int rank) {
      return fmt::format("accel/check/{}/{}", call.sequence, rank);
    };
    store_->set(key(rank_), store_bytes(description));
    checking_ = true;
    const torch::Tensor mine =
        accel::detail::one_value(static_cast<std::int64_t>(std::hash<std::string>{}(description)));
    const torch::Tensor all = allgather(mine, /*native=*/false);
    checking_ = false;
    const bool agree = torch::equal(all, mine.expand({size_}));
    if (agree) return call;
    std::string calls;
    for (int r = 0; r < size_; ++r) {
      const auto bytes = store_->get(key(r));
      calls += fmt::format("\n  rank {}: {}", r, store_text(bytes));
    }
    detail::fail("mismatched collective on rank {}: the ranks called different collectives at "
                 "the same point; every rank must issue the same collectives in the same order "
                 "with the same dtypes and shapes:{}",
                 rank_, calls);
  }

  // Runs `collective` on the transport's thread, behind the asynchronous ones issued before.
  template <class Collective>
  void through_shared_memory(const Call& call, Collective&& collective) {
    try {
      shm_->run(std::forward<Collective>(collective));
    } catch (const std::exception& error) {
      failed_in_shared_memory(call, error);
    }
  }
  // The transport's errors say what happened in full (the peer gone or late, each rank's call
  // on a mismatch, the timeout): the group adds which of its collectives it was.
  [[noreturn]] void failed_in_shared_memory(const Call& call, const std::exception& error) {
    broken_ = true;
    std::string_view what = error.what();
    if (what.starts_with("accel: ")) what.remove_prefix(7);
    // For the launcher's root cause (failure_record.hpp): a peer that exited caused this.
    if (what.find("has exited") != std::string_view::npos) note_failure_after_peer(what);
    detail::fail("{} failed on rank {}: {}", describe(call), rank_, what);
  }

  // broadcast() of a CUDA tensor: the root's layout over Gloo (a CPU tensor, checked as on the
  // CPU path), then the data over NCCL straight into the tensor (or a contiguous stand-in).
  void broadcast_on_device(torch::Tensor& tensor, int root, const Call& call) {
    const torch::Tensor mine = describe_layout(tensor);
    torch::Tensor layout = mine.clone();
    {
      std::vector<torch::Tensor> list{layout};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      await(backend_->broadcast(list, options), call);
    }
    if (rank_ != root && !torch::equal(layout, mine))
      detail::fail("broadcast #{} from rank {}: the root sent {} and rank {} passed {}; every rank "
                   "must pass a tensor of the root's dtype and shape",
                   call.sequence, root, layout_text(layout), rank_, layout_text(mine));
    torch::Tensor data = tensor.contiguous();
    std::vector<torch::Tensor> list{data};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    await(backend_for(data).broadcast(list, options), call);
    if (!data.is_same(tensor)) tensor.copy_(data);
  }

  void await(const c10::intrusive_ptr<c10d::Work>& work, const Call& call) {
    try {
      const StuckCollectiveWatch::Waiting waiting(stuck_watch_.get(), call.sequence,
                                                  [&call] { return describe(call); });
      work->wait();
    } catch (const std::exception& error) {
      failed(call, error);
    }
  }

  // A collective failed (a timeout, a peer gone): the error names it, what the peers were doing
  // as far as the store knows, and the timeout. The group is then broken: teardown skips its
  // wait.
  [[noreturn]] void failed(const Call& call, const std::exception& error) {
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

  // dtype and shape as int64s: [dtype, ndim, d0..d7] (dimensions past the eighth folded into
  // the eighth).
  static torch::Tensor describe_layout(const torch::Tensor& t) {
    std::vector<std::int64_t> layout(10, 1);
    layout[0] = static_cast<std::int64_t>(t.scalar_type());
    layout[1] = t.dim();
    for (std::int64_t d = 0; d < t.dim(); ++d) layout[static_cast<std::size_t>(2 + std::min<std::int64_t>(d, 7))] *= t.size(d);
    return accel::detail::values_tensor(layout);
  }
  static std::string layout_text(const torch::Tensor& layout) {
    const auto dims = std::min<std::int64_t>(layout[1].item<std::int64_t>(), 8);
    std::vector<std::int64_t> shape;
    for (std::int64_t d = 0; d < dims; ++d) shape.push_back(layout[2 + d].item<std::int64_t>());
    const auto dtype = layout[0].item<std::int64_t>();
    const bool known = dtype >= 0 && dtype < static_cast<std::int64_t>(c10::ScalarType::NumOptions);
    return fmt::format("a {} tensor of shape [{}]",
                       known ? c10::toString(static_cast<c10::ScalarType>(dtype)) : "?",
                       fmt::join(shape, ", "));
  }

  static std::string finished_key(int rank) { return fmt::format("accel/finished/{}", rank); }
  static double seconds(std::chrono::milliseconds duration) {
    return std::chrono::duration<double>(duration).count();
  }

  int rank_;
  int size_;
  bool check_;
  std::chrono::milliseconds timeout_;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string run_token_;  // for shared-memory segment names: the launch's, or empty
  std::string id_;         // this group's among the job's: "0", a subgroup "0.node1"
  GroupSettings settings_;
  bool checking_ = false;
  bool broken_ = false;  // a collective failed
  std::uint64_t sequence_ = 0;
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  c10::intrusive_ptr<detail::CommBackend> backend_;       // Gloo: CPU tensors
  c10::intrusive_ptr<detail::CommBackend> cuda_backend_;  // NCCL: CUDA tensors (training on CUDA)
  std::unique_ptr<DirectGloo> direct_;  // made by the first register_allreduce
  std::string_view caller_;             // Caller's name while one lives
  // Gloo and NCCL only (shared memory compares its calls itself); after store_: its thread
  // stops before the store goes.
  std::unique_ptr<StuckCollectiveWatch> stuck_watch_;
  // Last, so that it goes first: its thread stops before the rest of the group.
  std::unique_ptr<SharedMemoryPath> shm_;
};

}  // namespace accel::runtime
