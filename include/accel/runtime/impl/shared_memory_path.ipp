// SharedMemoryPath; shared_memory_path.hpp includes it in header-only mode.
#pragma once

#include "../../runtime/shared_memory_path.hpp"
#include "../tensor_layout.hpp"

namespace accel::runtime {

ACCEL_DECL std::optional<shm::DataType> shared_memory_type(const torch::Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) return std::nullopt;
  switch (t.scalar_type()) {
    case torch::kFloat: return shm::DataType::f32;
    case torch::kDouble: return shm::DataType::f64;
    case torch::kBFloat16: return shm::DataType::bf16;
    case torch::kHalf:
      if (shm::has_f16) return shm::DataType::f16;
      return std::nullopt;
    case torch::kLong: return shm::DataType::i64;
    case torch::kInt: return shm::DataType::i32;
    default: return std::nullopt;
  }
}

ACCEL_DECL SharedMemoryPath::SharedMemoryPath(c10d::Store& store, std::string run_token,
                                              const std::string& group, int rank, int size,
                                              std::chrono::milliseconds timeout,
                                              std::function<std::string()> left_peers)
    : rank_(rank), timeout_(timeout), left_peers_(std::move(left_peers)),
      transport_(connect(store, std::move(run_token), group, rank, size, timeout)),
      worker_([this] { serve(); }) {}

ACCEL_DECL SharedMemoryPath::~SharedMemoryPath() {
  {
    const std::scoped_lock lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

ACCEL_DECL std::shared_ptr<Completion> SharedMemoryPath::submit(
    std::function<void(shm::Transport&)> collective) {
  std::packaged_task<void()> task([this, collective = std::move(collective)] {
    collective(transport_);
  });
  auto done = std::make_shared<Completion>();
  done->future = task.get_future().share();
  {
    const std::scoped_lock lock(mutex_);
    queue_.push_back(std::move(task));
  }
  changed_.notify_all();
  return done;
}

ACCEL_DECL void SharedMemoryPath::failed(const CollectiveCall& call, const std::exception& error) {
  broken_ = true;
  const std::string_view what = accel::detail::without_accel_prefix(error.what());
  // For the launcher's root cause (failure_record.hpp): a peer that exited caused this.
  if (what.find("has exited") != std::string_view::npos ||
      what.find("has left the group") != std::string_view::npos)
    note_failure_after_peer(what);
  // Which peers have left, where a peer's absence is the cause (one gone, or late), not where
  // the ranks called different collectives.
  const bool mismatch = what.find("mismatched collective") != std::string_view::npos;
  const std::string left = left_peers_ && !mismatch ? left_peers_() : std::string();
  if (left.empty()) accel::detail::fail("{} failed on rank {}: {}", describe(call), rank_, what);
  accel::detail::fail("{} failed on rank {}: {}{}: a rank that skips a collective and leaves makes "
                      "the others wait until its process exits, or up to the timeout of {} s "
                      "(Options::timeout, ACCEL_TIMEOUT)",
                      describe(call), rank_, what, left,
                      std::chrono::duration<double>(timeout_).count());
}

ACCEL_DECL void SharedMemoryPath::leave() {
  run([](shm::Transport& transport) { transport.leave(); });
}

ACCEL_DECL bool SharedMemoryPath::carries(CollectiveOp op, const torch::Tensor& t) const {
  switch (op) {
    case CollectiveOp::barrier: return true;
    case CollectiveOp::allreduce:
    case CollectiveOp::reduce_scatter: return shared_memory_type(t).has_value();
    // A broadcast sends its layout and bytes as one contiguous CPU tensor (tensor_layout.hpp).
    case CollectiveOp::broadcast: return !t.is_cuda();
    case CollectiveOp::allgather: return t.device().is_cpu() && t.is_contiguous();
  }
  return false;
}

ACCEL_DECL void SharedMemoryPath::barrier(const CollectiveCall& call) {
  named(call, [](shm::Transport& transport) { transport.barrier(); });
}

ACCEL_DECL void SharedMemoryPath::allreduce(torch::Tensor& tensor, ReduceOp op,
                                            const CollectiveCall& call) {
  torch::Tensor data = tensor.contiguous();
  named(call, [&, type = *shared_memory_type(data)](shm::Transport& transport) {
    transport.allreduce(data.data_ptr(), static_cast<std::size_t>(data.numel()), type,
                        shm_reduction(op));
  });
  if (!data.is_same(tensor)) tensor.copy_(data);
}

ACCEL_DECL void SharedMemoryPath::broadcast(torch::Tensor& tensor, int root,
                                            const CollectiveCall& call) {
  broadcast_with_layout(tensor, root, rank_, call.sequence, [&](torch::Tensor& bytes) {
    named(call, [&](shm::Transport& transport) {
      transport.broadcast(bytes.data_ptr(), static_cast<std::size_t>(bytes.numel()), root);
    });
  });
}

ACCEL_DECL torch::Tensor SharedMemoryPath::allgather(const torch::Tensor& input,
                                                     const CollectiveCall& call) {
  std::vector<std::int64_t> shape = input.sizes().vec();
  shape[0] *= transport_.size();
  torch::Tensor output = torch::empty(shape, input.options());
  allgather_into(output, input, call);
  return output;
}

ACCEL_DECL void SharedMemoryPath::allgather_into(torch::Tensor& output, const torch::Tensor& input,
                                                 const CollectiveCall& call) {
  named(call, [&](shm::Transport& transport) {
    transport.allgather(input.data_ptr(), output.data_ptr(), byte_size(input));
  });
}

ACCEL_DECL torch::Tensor SharedMemoryPath::reduce_scatter(const torch::Tensor& flat, ReduceOp op,
                                                          const CollectiveCall& call) {
  torch::Tensor result = torch::empty({flat.numel() / transport_.size()}, flat.options());
  named(call, [&, type = *shared_memory_type(flat)](shm::Transport& transport) {
    transport.reduce_scatter(flat.data_ptr(), result.data_ptr(),
                             static_cast<std::size_t>(result.numel()), type,
                             shm_reduction(op));  // averaged there
  });
  return result;
}

ACCEL_DECL PendingCollective SharedMemoryPath::start_allreduce(const torch::Tensor& sent,
                                                               const CollectiveCall& call) {
  return started(call, sent,
                 submit([data = sent, type = *shared_memory_type(sent)](shm::Transport& transport) {
                   transport.allreduce(data.data_ptr(), static_cast<std::size_t>(data.numel()),
                                       type, shm::Reduction::sum);
                 }));
}

ACCEL_DECL PendingCollective SharedMemoryPath::start_allgather_into(torch::Tensor& output,
                                                                    const torch::Tensor& input,
                                                                    const CollectiveCall& call) {
  return started(call, input,
                 submit([input, output](shm::Transport& transport) {
                   transport.allgather(input.data_ptr(), output.data_ptr(), byte_size(input));
                 }));
}

ACCEL_DECL PendingCollective SharedMemoryPath::start_reduce_scatter(const torch::Tensor& input,
                                                                    torch::Tensor& into,
                                                                    ReduceOp op,
                                                                    const CollectiveCall& call) {
  const torch::Tensor result =
      into.defined() ? into : torch::empty({input.numel() / transport_.size()}, input.options());
  PendingCollective pending = started(
      call, input,
      submit([input, result, type = *shared_memory_type(input),
              reduction = shm_reduction(op)](shm::Transport& transport) {
        transport.reduce_scatter(input.data_ptr(), result.data_ptr(),
                                 static_cast<std::size_t>(result.numel()), type, reduction);
      }));
  pending.result = result;
  return pending;
}

ACCEL_DECL std::shared_ptr<shm::Regions> SharedMemoryPath::map_regions(
    c10d::Store& store, const std::string& run_token, const std::string& group, std::size_t bytes,
    const CollectiveCall& call) {
  const std::string key = fmt::format("accel/shm/regions/{}", regions_mapped_++);
  const int size = transport_.size();
  const std::size_t segment_bytes = shm::Regions::segment_bytes(size, bytes);
  std::shared_ptr<shm::Regions> regions;
  named(call, [&](shm::Transport& transport) {
    regions = std::make_shared<shm::Regions>(
        share_segment(store, key, run_token, group, rank_, segment_bytes, timeout_), rank_, size,
        bytes);
    transport.regions_mapped(bytes);
    regions->unlink();
  });
  return regions;
}

ACCEL_DECL void SharedMemoryPath::allreduce_regions(shm::Regions& regions,
                                                    const torch::Tensor& data, shm::DataType type,
                                                    double scale, const CollectiveCall& call) {
  named(call, [&](shm::Transport& transport) {
    transport.allreduce_regions(regions.bases(), offset_in(regions, data),
                                static_cast<std::size_t>(data.numel()), type, scale);
  });
}

ACCEL_DECL PendingCollective SharedMemoryPath::start_allreduce_regions(
    std::shared_ptr<shm::Regions> regions, torch::Tensor data, shm::DataType type, double scale,
    const CollectiveCall& call) {
  const std::size_t offset = offset_in(*regions, data);
  return started(
      call, data,
      submit([regions = std::move(regions), data, type, offset, scale](shm::Transport& transport) {
        transport.allreduce_regions(regions->bases(), offset,
                                    static_cast<std::size_t>(data.numel()), type, scale);
      }));
}

ACCEL_DECL shm::Transport SharedMemoryPath::connect(c10d::Store& store,
                                                    const std::string& run_token,
                                                    const std::string& group, int rank, int size,
                                                    std::chrono::milliseconds timeout) {
  const std::size_t bytes = shm::Transport::segment_bytes(size, slot_bytes);
  return shm::Transport(share_segment(store, "accel/shm/name", run_token, group, rank, bytes,
                                      timeout),
                        rank, size, slot_bytes, timeout);
}

ACCEL_DECL shm::Segment SharedMemoryPath::share_segment(c10d::Store& store, const std::string& key,
                                                        const std::string& run_token,
                                                        const std::string& group, int rank,
                                                        std::size_t bytes,
                                                        std::chrono::milliseconds timeout) {
  if (rank == 0) {
    shm::Segment segment = shm::Segment::create_fresh(run_token, group, bytes);
    store.set(key, std::vector<std::uint8_t>(segment.name().begin(), segment.name().end()));
    return segment;
  }
  const auto value = store.get(key);  // waits for rank 0, up to the store's timeout
  const std::string name(value.begin(), value.end());
  if (!shm::is_segment_name(name))
    accel::detail::fail("rank {}: the store holds '{}' under {} as the name of a shared-memory "
                        "segment, which is not one of accel's; set ACCEL_SHARED_MEMORY=0 to use "
                        "Gloo over loopback instead",
                        rank, name, key);
  return shm::Segment::open(name, bytes, timeout);
}

ACCEL_DECL void SharedMemoryPath::serve() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !busy_); });
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    task();  // an error lands in the task's future
    {
      const std::scoped_lock lock(mutex_);
      busy_ = false;
    }
    changed_.notify_all();
  }
}

}  // namespace accel::runtime
