// Transport, the collectives through shared memory; transport.hpp includes it in header-only mode.
#pragma once

#include "../transport.hpp"

namespace accel::runtime::shm {

ACCEL_DECL std::string_view to_string(Operation op) {
  switch (op) {
    case Operation::allreduce: return "allreduce";
    case Operation::reduce_scatter: return "reduce_scatter";
    case Operation::allgather: return "allgather";
    case Operation::broadcast: return "broadcast";
    case Operation::map_regions: return "mapping of shared buckets";
    case Operation::allreduce_regions: return "allreduce in shared buckets";
    case Operation::barrier: return "barrier";
    default: return "set-up";
  }
}

ACCEL_DECL Transport::Transport(Segment segment, int rank, int size, std::size_t slot_bytes,
                                std::chrono::milliseconds timeout)
    : segment_(std::move(segment)), rank_(rank), size_(size),
      slot_bytes_(slot_bytes / 64 * 64),
      barrier_(reinterpret_cast<WakeWords*>(segment_.data()), controls(), rank, size, timeout) {
  if (segment_.size() != segment_bytes(size, slot_bytes) || slot_bytes_ < 64)
    accel::detail::fail("shared-memory segment {}: {} bytes, expected {} for {} ranks of {}-byte "
                        "slots",
                        segment_.name(), segment_.size(), segment_bytes(size, slot_bytes), size,
                        slot_bytes);
  std::atomic_ref(controls()[rank_].pid).store(::getpid(), std::memory_order_release);
  start(Operation::setup, DataType::u8, 0, 0);
  meet(Operation::setup);
  segment_.unlink();
}

ACCEL_DECL void Transport::allreduce(void* data, std::size_t count, DataType type, Reduction op) {
  const std::size_t es = element_size(type);
  std::byte* bytes = static_cast<std::byte*>(data);
  const std::size_t piece = slot_bytes_ / es;
  start(Operation::allreduce, type, count, static_cast<std::uint64_t>(op));
  if (count == 0) return meet(Operation::allreduce);
  std::vector<const std::byte*> inputs(static_cast<std::size_t>(size_));
  for (std::size_t begin = 0, k = 0; begin < count; begin += piece, ++k) {
    const std::size_t n = std::min(piece, count - begin);
    const int set = static_cast<int>(k & 1);
    std::memcpy(slot(set, rank_), bytes + begin * es, n * es);
    meet(Operation::allreduce);
    const auto [lo, hi] = share(n, rank_);
    for (int r = 0; r < size_; ++r) inputs[static_cast<std::size_t>(r)] = slot(set, r) + lo * es;
    shm::reduce(type, inputs.data(), size_, result(set) + lo * es, hi - lo, op);
    meet(Operation::allreduce);
    std::memcpy(bytes + begin * es, result(set), n * es);
  }
}

ACCEL_DECL void Transport::reduce_scatter(const void* input, void* output, std::size_t chunk,
                                          DataType type, Reduction op) {
  const std::size_t es = element_size(type);
  const std::byte* in = static_cast<const std::byte*>(input);
  std::byte* out = static_cast<std::byte*>(output);
  const std::size_t piece = std::max<std::size_t>(1, slot_bytes_ / es / static_cast<std::size_t>(size_));
  start(Operation::reduce_scatter, type, chunk, static_cast<std::uint64_t>(op));
  if (chunk == 0) return meet(Operation::reduce_scatter);
  std::vector<const std::byte*> inputs(static_cast<std::size_t>(size_));
  for (std::size_t begin = 0, k = 0; begin < chunk; begin += piece, ++k) {
    const std::size_t n = std::min(piece, chunk - begin);
    const int set = static_cast<int>(k & 1);
    for (int r = 0; r < size_; ++r)
      std::memcpy(slot(set, rank_) + static_cast<std::size_t>(r) * n * es,
                  in + (static_cast<std::size_t>(r) * chunk + begin) * es, n * es);
    meet(Operation::reduce_scatter);
    for (int r = 0; r < size_; ++r)
      inputs[static_cast<std::size_t>(r)] = slot(set, r) + static_cast<std::size_t>(rank_) * n * es;
    shm::reduce(type, inputs.data(), size_, out + begin * es, n, op);
  }
}

ACCEL_DECL void Transport::allgather(const void* input, void* output, std::size_t bytes) {
  const std::byte* in = static_cast<const std::byte*>(input);
  std::byte* out = static_cast<std::byte*>(output);
  start(Operation::allgather, DataType::u8, bytes, 0);
  if (bytes == 0) return meet(Operation::allgather);
  for (std::size_t begin = 0, k = 0; begin < bytes; begin += slot_bytes_, ++k) {
    const std::size_t n = std::min(slot_bytes_, bytes - begin);
    const int set = static_cast<int>(k & 1);
    std::memcpy(slot(set, rank_), in + begin, n);
    meet(Operation::allgather);
    for (int r = 0; r < size_; ++r)
      if (r != rank_ || out + static_cast<std::size_t>(r) * bytes != in)
        std::memcpy(out + static_cast<std::size_t>(r) * bytes + begin, slot(set, r), n);
  }
}

ACCEL_DECL void Transport::broadcast(void* data, std::size_t bytes, int root) {
  std::byte* buffer = static_cast<std::byte*>(data);
  start(Operation::broadcast, DataType::u8, bytes, static_cast<std::uint64_t>(root));
  if (bytes == 0) return meet(Operation::broadcast);
  for (std::size_t begin = 0, k = 0; begin < bytes; begin += slot_bytes_, ++k) {
    const std::size_t n = std::min(slot_bytes_, bytes - begin);
    const int set = static_cast<int>(k & 1);
    if (rank_ == root) std::memcpy(slot(set, root), buffer + begin, n);
    meet(Operation::broadcast);
    if (rank_ != root) std::memcpy(buffer + begin, slot(set, root), n);
  }
}

ACCEL_DECL void Transport::barrier() {
  start(Operation::barrier, DataType::u8, 0, 0);
  meet(Operation::barrier);
}

ACCEL_DECL void Transport::regions_mapped(std::size_t bytes) {
  start(Operation::map_regions, DataType::u8, bytes, 0);
  meet(Operation::map_regions);
}

ACCEL_DECL void Transport::allreduce_regions(std::byte* const* regions, std::size_t offset,
                                             std::size_t count, DataType type, double scale) {
  const std::size_t es = element_size(type);
  // The offset travels in the call record: the ranks' buckets must lie at the same place.
  start(Operation::allreduce_regions, type, count, offset);
  const auto [lo, hi] = share(count, rank_);
  std::vector<std::byte*> slice(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r)
    slice[static_cast<std::size_t>(r)] = regions[r] + offset + lo * es;
  shm::sum_into_each(type, slice.data(), size_, slice.data(), size_, hi - lo, scale);
  meet(Operation::allreduce_regions);
}

ACCEL_DECL std::size_t Transport::header_bytes(int size) {
  const std::size_t raw = sizeof(WakeWords) + static_cast<std::size_t>(size) * sizeof(RankControl);
  return (raw + 4095) / 4096 * 4096;
}

ACCEL_DECL std::byte* Transport::slot(int set, int r) const {
  return segment_.data() + header_bytes(size_) +
         (static_cast<std::size_t>(set) * (static_cast<std::size_t>(size_) + 1) +
          static_cast<std::size_t>(r)) * slot_bytes_;
}

ACCEL_DECL std::pair<std::size_t, std::size_t> Transport::share(std::size_t n, int r) const {
  const auto size = static_cast<std::size_t>(size_);
  const auto rank = static_cast<std::size_t>(r);
  return {n * rank / size, n * (rank + 1) / size};
}

ACCEL_DECL void Transport::start(Operation op, DataType type, std::uint64_t count,
                                 std::uint64_t argument) {
  if (broken_)
    accel::detail::fail("{} on rank {}: an earlier shared-memory collective failed, so the ranks "
                        "no longer agree on where they are; the group cannot be used any more",
                        to_string(op), rank_);
  current_ = {sequence_++, static_cast<std::uint64_t>(op), static_cast<std::uint64_t>(type),
              count, argument};
  for (std::size_t i = 0; i < current_.size(); ++i)
    std::atomic_ref(controls()[rank_].call[i]).store(current_[i], std::memory_order_relaxed);
  meet(op);
  const auto call_of = [&](int r) {
    Call theirs{};
    for (std::size_t i = 0; i < theirs.size(); ++i)
      theirs[i] = std::atomic_ref(controls()[r].call[i]).load(std::memory_order_relaxed);
    return theirs;
  };
  bool agree = true;
  for (int r = 0; r < size_; ++r) agree = agree && call_of(r) == current_;
  if (!agree) {
    broken_ = true;
    // Formatted only here: every collective passes through this check.
    std::string calls;
    for (int r = 0; r < size_; ++r)
      calls += fmt::format("\n  rank {}: {}", r, describe(call_of(r)));
    accel::detail::fail("mismatched collective on rank {}: the ranks called different collectives "
                        "at the same point; every rank must issue the same collectives in the same "
                        "order with the same dtypes and sizes:{}",
                        rank_, calls);
  }
}

ACCEL_DECL void Transport::meet(Operation op) {
  barrier_.arrive();
  try {
    barrier_.wait([&] {
      return fmt::format("shared-memory {} #{} on rank {}", to_string(op), current_[0], rank_);
    });
  } catch (...) {
    broken_ = true;
    throw;
  }
}

ACCEL_DECL std::string Transport::describe(const Call& call) {
  const auto op = static_cast<Operation>(call[1]);
  const auto type = static_cast<DataType>(call[2]);
  switch (op) {
    case Operation::allreduce:
    case Operation::reduce_scatter:
      return fmt::format("{} #{} ({} elements of {})", to_string(op), call[0], call[3],
                         to_string(type));
    case Operation::broadcast:
      return fmt::format("broadcast #{} ({} bytes from rank {})", call[0], call[3], call[4]);
    case Operation::barrier:
      return fmt::format("barrier #{}", call[0]);
    case Operation::allreduce_regions:
      return fmt::format("{} #{} ({} elements of {} at byte {})", to_string(op), call[0], call[3],
                         to_string(type), call[4]);
    default:
      return fmt::format("{} #{} ({} bytes)", to_string(op), call[0], call[3]);
  }
}

}  // namespace accel::runtime::shm
