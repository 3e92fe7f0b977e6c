// FlatBufferCache's members; flat_buffer_cache.hpp includes this file in header-only mode.
#pragma once

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <memory>

#include "../flat_buffer_cache.hpp"

namespace accel::parallel::detail {

ACCEL_DECL FlatBufferCache& FlatBufferCache::instance() {
  // Never destroyed: a tensor destroyed after main() (a static the user keeps) still gives its
  // block back.
  static FlatBufferCache* const cache = new FlatBufferCache();
  return *cache;
}

ACCEL_DECL at::DataPtr FlatBufferCache::take(std::size_t bytes) {
  if (bytes == 0) return at::DataPtr(nullptr, at::Device(at::kCPU));
  std::unique_ptr<Block> lent;
  std::vector<Block> to_free;  // freed once the lock is let go, before a fresh block is taken
  {
    std::lock_guard<std::mutex> lock(mutex_);
    largest_bytes_ = std::max(largest_bytes_, bytes);
    // The most recently freed block of this size: its pages are the likeliest still in cache.
    const auto same = std::find_if(kept_.rbegin(), kept_.rend(),
                                   [bytes](const Block& block) { return block.bytes == bytes; });
    if (same != kept_.rend()) {
      lent = std::make_unique<Block>(std::move(*same));
      kept_.erase(std::next(same).base());
      ++counts_.reused_blocks;
    } else {
      // Kept blocks go, oldest first, only as far as the total (kept, lent and this one) must
      // stay within the most ever lent at once, this request included, plus one largest block:
      // a step's blocks of several sizes (a unit's buffer, its gradient, their narrowed copies)
      // are more, one after the other, than it lends at once, and without that one block of
      // room each size would free another's at every unit.
      const std::size_t in_use = lent_bytes_ + bytes;
      const std::size_t bound = std::max(peak_lent_bytes_, in_use) + largest_bytes_;
      std::size_t kept = kept_bytes();
      auto end = kept_.begin();
      for (; end != kept_.end() && kept + in_use > bound; ++end) kept -= end->bytes;
      to_free.assign(std::make_move_iterator(kept_.begin()), std::make_move_iterator(end));
      kept_.erase(kept_.begin(), end);
      ++counts_.fresh_blocks;
    }
    lent_bytes_ += bytes;
    peak_lent_bytes_ = std::max(peak_lent_bytes_, lent_bytes_);
  }
  to_free.clear();
  if (!lent) lent = std::make_unique<Block>(Block{bytes, c10::GetCPUAllocator()->allocate(bytes)});
  void* const data = lent->memory.get();
  return at::DataPtr(data, lent.release(), &FlatBufferCache::give_back, at::Device(at::kCPU));
}

ACCEL_DECL void FlatBufferCache::give_back(void* block) {
  std::unique_ptr<Block> returned(static_cast<Block*>(block));
  FlatBufferCache& cache = instance();
  std::lock_guard<std::mutex> lock(cache.mutex_);
  cache.lent_bytes_ -= returned->bytes;
  cache.kept_.push_back(std::move(*returned));
}

ACCEL_DECL void FlatBufferCache::release() {
  std::vector<Block> to_free;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    to_free.swap(kept_);
    peak_lent_bytes_ = lent_bytes_;  // a whole-model gather's peak is not a step's
    largest_bytes_ = 0;
  }
}

ACCEL_DECL FlatBufferCache::Counts FlatBufferCache::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Counts counts = counts_;
  counts.kept_bytes = kept_bytes();
  return counts;
}

ACCEL_DECL std::size_t FlatBufferCache::kept_bytes() const {
  std::size_t kept = 0;
  for (const Block& block : kept_) kept += block.bytes;
  return kept;
}

ACCEL_DECL torch::Tensor cached_cpu_buffer(std::int64_t numel,
                                           const torch::TensorOptions& options) {
  torch::Tensor buffer = torch::empty({0}, options.device(torch::kCPU));
  resize_storage_bytes(buffer, static_cast<std::size_t>(numel) * options.dtype().itemsize());
  buffer.unsafeGetTensorImpl()->set_sizes_contiguous({numel});
  return buffer;
}

ACCEL_DECL void resize_storage_bytes(const torch::Tensor& tensor, std::size_t bytes) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == bytes) return;
  at::DataPtr memory(nullptr, storage->device());
  if (bytes != 0)
    memory = storage->device().is_cpu() ? FlatBufferCache::instance().take(bytes)
                                        : storage->allocator()->allocate(bytes);
  storage->set_data_ptr_noswap(std::move(memory));
  storage->set_nbytes(bytes);
}

}  // namespace accel::parallel::detail
