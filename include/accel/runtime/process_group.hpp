// The group of ranks and the collectives accel uses, over c10d (Gloo on CPU). Every gap of a
// backend is filled here, once, for every strategy:
//   - reduce-scatter as alltoall plus a local sum: each rank sends and receives (N-1)/N of the
//     data, like a ring (PyTorch's own fallback, allreduce then slice, moves twice that);
//   - all-gather into one flat tensor as a list all-gather plus a concatenation;
//   - bf16 on the wire through fp32 where Gloo lacks bf16.
// With collective checking on, the ranks first compare a fingerprint of each collective
// (operation, sequence number, dtype, shape); a mismatch fails on every rank, naming what each
// rank called, instead of hanging or corrupting memory.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/torch_compat.hpp"
#include "direct_gloo.hpp"
#include "environment.hpp"

namespace accel::runtime {

enum class ReduceOp { sum, mean, max, min };

class ProcessGroup {
 public:
  ProcessGroup(const Environment& env, std::chrono::milliseconds timeout, bool check_collectives)
      : rank_(env.process.rank), size_(env.process.world_size), check_(check_collectives),
        timeout_(timeout) {
    if (!env.store_dir.empty()) {
      // A folder only this user can read (accel-launch makes it 0700): no socket is opened.
      store_ = c10::make_intrusive<c10d::FileStore>(env.store_dir + "/store", size_);
    } else {
      c10d::TCPStoreOptions options;
      options.port = static_cast<std::uint16_t>(env.master_port);
      options.isServer = rank_ == 0;
      options.numWorkers = static_cast<std::size_t>(size_);
      options.timeout = timeout;
      try {
        store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
      } catch (const std::exception& error) {
        detail::fail("rank {} could not reach the rendezvous at MASTER_ADDR={} MASTER_PORT={}: {}",
                     rank_, env.master_addr, env.master_port, error.what());
      }
    }
    store_->setTimeout(timeout);
    // Each group of this process gets its own key space, so that a second group (a second
    // Accelerator) never reads the first one's rendezvous keys. Ranks create groups in the same
    // order, so the numbers agree across ranks.
    static int groups_created = 0;
    store_ = c10::make_intrusive<c10d::PrefixStore>(fmt::format("accel/group{}", groups_created++),
                                                    store_);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    // One node: keep Gloo's connections on loopback. Several: the interface of this host name.
    device_ = env.process.local_world_size == size_
                  ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                  : c10d::ProcessGroupGloo::createDefaultDevice();
    options->devices.push_back(device_);
    backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank_, size_, options);
  }

  // Gloo fails a peer's pending receive when this side closes its connections, so a rank that
  // finished first must not tear down while the others are still inside a collective: every
  // rank leaves only once all ranks have reached here (through the store, not Gloo). Not while
  // an exception unwinds: a failing rank must exit at once so that its launcher stops the rest.
  ~ProcessGroup() {
    if (std::uncaught_exceptions() > 0) return;
    try {
      store_->set(fmt::format("accel/finished/{}", rank_), std::vector<std::uint8_t>{1});
      std::vector<std::string> keys;
      for (int r = 0; r < size_; ++r) keys.push_back(fmt::format("accel/finished/{}", r));
      store_->wait(keys, std::chrono::minutes(1));
    } catch (...) {
      // A rank that died cannot be waited for; its launcher is bringing the group down.
    }
  }

  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::uint64_t collectives_issued() const { return sequence_; }
  c10d::Store& store() { return *store_; }

  void barrier() {
    check("barrier", torch::Tensor());
    backend_->barrier()->wait();
  }

  // In place; mean divides the sum by the world size (Gloo has no AVG).
  void allreduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::sum) {
    check("allreduce", tensor);
    on_wire(tensor, [&](torch::Tensor& wire) {
      std::vector<torch::Tensor> list{wire};
      c10d::AllreduceOptions options;
      options.reduceOp = to_c10d(op);
      backend_->allreduce(list, options)->wait();
    });
    if (op == ReduceOp::mean) tensor.div_(size_);
  }

  // Starts a sum all-reduce of a contiguous tensor and returns its handle; wait() on it, then
  // read the tensor (or the wire copy returned alongside where the dtype needed one).
  struct Pending {
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor tensor;  // the tensor the result lands in
    torch::Tensor wire;    // its fp32 stand-in on a wire without the dtype, else undefined
    void wait() {
      work->wait();
      if (wire.defined()) tensor.copy_(wire);
    }
  };
  Pending allreduce_async(torch::Tensor tensor) {
    return allreduce_async(tensor, wire_native(tensor) ? torch::Tensor() : to_wire(tensor));
  }
  // The same with the stand-in given: `wire` travels, and its sum lands in `tensor` at wait().
  Pending allreduce_async(torch::Tensor tensor, torch::Tensor wire) {
    const torch::Tensor& sent = wire.defined() ? wire : tensor;
    if (!wire_native(sent))
      detail::fail("{} all-reduce is not available on this Gloo (libtorch {}); use an fp32 or "
                   "fp16 wire",
                   c10::toString(sent.scalar_type()), TORCH_VERSION);
    check("allreduce", sent);
    Pending pending{{}, tensor, wire};
    std::vector<torch::Tensor> list{sent};
    pending.work = backend_->allreduce(list);
    return pending;
  }

  // A sum all-reduce of one tensor whose buffers are registered with Gloo once and which then
  // runs on the calling thread (direct_gloo.hpp): the fast path for small, reused tensors such
  // as gradient buckets. Registering is collective; run() blocks until every rank's sum is in.
  class RegisteredAllreduce {
   public:
    void run() {
      group_->check("allreduce", flat_);
      try {
        ring_->run();
      } catch (const std::exception& error) {
        detail::fail("all-reduce of {} elements failed on rank {}: {} (a peer stopped, exited, "
                     "or did not reach it within the timeout of {} s in Options::timeout)",
                     flat_.numel(), group_->rank_, error.what(),
                     std::chrono::duration<double>(group_->timeout_).count());
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
    // Its own key space and connections: c10d's never see these messages.
    if (!direct_)
      direct_ = std::make_unique<DirectGloo>(
          c10::make_intrusive<c10d::PrefixStore>("accel/direct", store_), rank_, size_, device_,
          timeout_);
    RegisteredAllreduce registered;
    registered.group_ = this;
    registered.flat_ = flat;
    registered.ring_ = direct_->ring_allreduce(registered.flat_);
    return registered;
  }

  void broadcast(torch::Tensor& tensor, int root = 0) {
    check(fmt::format("broadcast(root={})", root), tensor);
    on_wire(tensor, [&](torch::Tensor& wire) {
      std::vector<torch::Tensor> list{wire};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      backend_->broadcast(list, options)->wait();
    });
  }

  // Every rank's tensor (all of one shape), concatenated along dimension 0 in rank order; a
  // 0-dim tensor counts as shape [1].
  torch::Tensor allgather(const torch::Tensor& tensor, bool native = true) {
    check("allgather", tensor);
    const torch::Tensor input = tensor.dim() == 0 ? tensor.reshape({1}) : tensor.contiguous();
    std::vector<std::int64_t> shape = input.sizes().vec();
    shape[0] *= size_;
    if (native && detail::gloo_has_allgather_base && wire_native(input)) {
      torch::Tensor output = torch::empty(shape, input.options());
      torch::Tensor in = input;
      backend_->_allgather_base(output, in)->wait();
      return output;
    }
    // Fallback: list all-gather, then one concatenation.
    std::vector<torch::Tensor> inputs{to_wire(input)};
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(torch::empty_like(inputs[0]));
    backend_->allgather(outputs, inputs)->wait();
    return torch::cat(outputs[0], 0).to(input.scalar_type());
  }

  // input holds size() equal chunks along its flat layout; returns this rank's chunk, summed
  // over ranks (or averaged with ReduceOp::mean).
  torch::Tensor reduce_scatter(const torch::Tensor& input, ReduceOp op = ReduceOp::sum,
                               bool native = true) {
    check("reduce_scatter", input);
    if (input.numel() % size_ != 0)
      detail::fail("reduce_scatter: {} elements do not split into {} equal chunks; pad the input "
                   "to a multiple of the world size",
                   input.numel(), size_);
    if (op != ReduceOp::sum && op != ReduceOp::mean)
      detail::fail("reduce_scatter supports sum and mean, not max or min");
    const std::int64_t chunk = input.numel() / size_;
    torch::Tensor flat = input.contiguous().view(-1);
    torch::Tensor result;
    if (native && detail::gloo_has_reduce_scatter_base && wire_native(flat)) {
      result = torch::empty({chunk}, flat.options());
      c10d::ReduceScatterOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      backend_->_reduce_scatter_base(result, flat, options)->wait();
    } else {
      // alltoall: chunk j goes to rank j, so rank r receives every rank's chunk r; summing them
      // locally finishes the reduce-scatter. In fp32 where the wire lacks bf16.
      torch::Tensor wire = to_wire(flat);
      torch::Tensor received = torch::empty_like(wire);
      std::vector<std::int64_t> equal_split;
      backend_->alltoall_base(received, wire, equal_split, equal_split)->wait();
      result = received.view({size_, chunk}).sum(0).to(flat.scalar_type());
    }
    if (op == ReduceOp::mean) result.div_(size_);
    return result;
  }

  // Raw bytes from every rank, in rank order; lengths may differ (for gather_object).
  std::vector<std::string> allgather_bytes(const std::string& bytes) {
    const torch::Tensor length = torch::tensor({static_cast<std::int64_t>(bytes.size())});
    const torch::Tensor lengths = allgather(length);
    const std::int64_t longest = lengths.max().item<std::int64_t>();
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
  static c10d::ReduceOp to_c10d(ReduceOp op) {
    switch (op) {
      case ReduceOp::max: return c10d::ReduceOp::MAX;
      case ReduceOp::min: return c10d::ReduceOp::MIN;
      default: return c10d::ReduceOp::SUM;
    }
  }

  static bool wire_native(const torch::Tensor& t) {
    return t.scalar_type() != torch::kBFloat16 || detail::gloo_has_bf16;
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

  // With checking on: every rank publishes what it is about to call, the ranks compare hashes
  // (one small all-gather that always matches), and on a mismatch every rank reads what each
  // rank called and fails naming them.
  void check(std::string_view operation, const torch::Tensor& tensor) {
    if (checking_) return;  // the fingerprint's own all-gather
    const std::uint64_t sequence = sequence_++;
    if (!check_) return;
    const std::string description =
        tensor.defined() ? fmt::format("{} #{} dtype={} shape={}", operation, sequence,
                                       c10::toString(tensor.scalar_type()),
                                       fmt::join(tensor.sizes(), "x"))
                         : fmt::format("{} #{}", operation, sequence);
    const auto key = [&](int rank) { return fmt::format("accel/check/{}/{}", sequence, rank); };
    store_->set(key(rank_), std::vector<std::uint8_t>(description.begin(), description.end()));
    checking_ = true;
    const torch::Tensor mine =
        torch::tensor({static_cast<std::int64_t>(std::hash<std::string>{}(description))});
    const torch::Tensor all = allgather(mine, /*native=*/false);
    checking_ = false;
    const bool agree = torch::equal(all, mine.expand({size_}));
    if (agree) return;
    std::string calls;
    for (int r = 0; r < size_; ++r) {
      const auto bytes = store_->get(key(r));
      calls += fmt::format("\n  rank {}: {}", r, std::string(bytes.begin(), bytes.end()));
    }
    detail::fail("mismatched collective on rank {}: the ranks called different collectives at "
                 "the same point; every rank must issue the same collectives in the same order "
                 "with the same dtypes and shapes:{}",
                 rank_, calls);
  }

  int rank_;
  int size_;
  bool check_;
  std::chrono::milliseconds timeout_;
  bool checking_ = false;
  std::uint64_t sequence_ = 0;
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  c10::intrusive_ptr<detail::CommBackend> backend_;
  std::unique_ptr<DirectGloo> direct_;  // made by the first register_allreduce
};

}  // namespace accel::runtime
