// HostSnapshot; host_snapshot.hpp includes it in header-only mode.
#pragma once

#include "../../detail/error.hpp"
#include "../host_snapshot.hpp"

#if defined(USE_C10D_NCCL)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace accel::state {

ACCEL_DECL SnapshotTensors HostSnapshot::take(const SnapshotTensors& live) {
  SnapshotTensors taken;
  taken.reserve(live.size());
  buffers_.resize(live.size());
  bool on_device = false;
  bytes_ = 0;
  for (std::size_t i = 0; i < live.size(); ++i) {
    const torch::Tensor& source = live[i].second;
    const bool pinned = source.is_cuda();
    on_device = on_device || pinned;
    Buffer& buffer = buffers_[i];
    if (!buffer.data.defined() || buffer.data.scalar_type() != source.scalar_type() ||
        buffer.data.numel() != source.numel() || buffer.pinned != pinned)
      buffer = {torch::empty({source.numel()}, torch::TensorOptions()
                                                   .dtype(source.scalar_type())
                                                   .pinned_memory(pinned)),
                pinned};
    bytes_ += static_cast<std::int64_t>(buffer.data.nbytes());
    taken.emplace_back(live[i].first, buffer.data.view(source.sizes()));
  }
  if (on_device) {
    copy_from_device(live, taken);
  } else {
    for (std::size_t i = 0; i < live.size(); ++i) taken[i].second.copy_(live[i].second);
  }
  return taken;
}

ACCEL_DECL void HostSnapshot::copy_from_device(const SnapshotTensors& live,
                                               const SnapshotTensors& taken) {
#if defined(USE_C10D_NCCL)
  c10::DeviceIndex index = 0;
  for (const auto& item : live)
    if (item.second.is_cuda()) index = item.second.device().index();
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(index);
  const c10::cuda::CUDAStream copy = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
  // The copies start after what the loop has queued: the step that produced these values.
  at::cuda::CUDAEvent queued;
  queued.record(compute);
  queued.block(copy);
  {
    const c10::cuda::CUDAStreamGuard on_copy_stream(copy);
    for (std::size_t i = 0; i < live.size(); ++i) {
      const torch::Tensor& source = live[i].second;
      if (!source.is_cuda()) {
        taken[i].second.copy_(source);
        continue;
      }
      taken[i].second.copy_(source, /*non_blocking=*/true);
      // A temporary (a reshaped view's copy) freed after this call must not be reused by the
      // current stream while the copy stream still reads it.
      c10::cuda::CUDACachingAllocator::recordStream(source.storage().data_ptr(), copy);
    }
  }
  auto copied = std::make_shared<at::cuda::CUDAEvent>();
  copied->record(copy);
  // The next step's kernels wait for the copies on the device; the host goes on.
  copied->block(compute);
  copied_ = std::move(copied);
#else
  (void)taken;
  accel::detail::fail("save_state: '{}' is on a device, and this libtorch has no CUDA to copy it "
                      "with; save from the CPU",
                      live.empty() ? std::string() : live.front().first);
#endif
}

ACCEL_DECL void HostSnapshot::wait_until_copied() {
#if defined(USE_C10D_NCCL)
  if (copied_) static_cast<at::cuda::CUDAEvent*>(copied_.get())->synchronize();
#endif
  copied_.reset();
}

}  // namespace accel::state
