// The copy of a checkpoint's tensors that a background save writes (background_save.hpp). It is
// taken on the training thread, into host memory, so that the loop may change the live tensors
// as soon as save_state() returns.
//
// One snapshot at a time, its buffers kept from one save to the next and reused wherever a
// tensor keeps its dtype and size (the usual case: the same models and optimizers), so the memory
// it costs is bounded by what one rank file holds, and is counted as
// MemoryUse::checkpoint_snapshot (memory_use()).
//
// On the CPU each tensor is copied into its buffer. On CUDA the buffers are pinned and filled by
// a copy stream that starts after the work already queued on the current stream; the current
// stream then waits for those copies (on the device, not the host), so that the next step cannot
// change a value before it is copied, and the writer waits for them (wait_until_copied) before it
// reads the buffers. That path is compiled where libtorch has CUDA (USE_C10D_NCCL, as
// runtime/nccl.hpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../detail/separate_compilation.hpp"

namespace accel::state {

// A rank file's tensors, by name, in the order written.
using SnapshotTensors = std::vector<std::pair<std::string, torch::Tensor>>;

class HostSnapshot {
 public:
  HostSnapshot() = default;
  HostSnapshot(const HostSnapshot&) = delete;
  HostSnapshot& operator=(const HostSnapshot&) = delete;

  // `live`'s values in this snapshot's buffers, under the same names and shapes. The previous
  // snapshot's buffers are reused, so its tensors must no longer be in use.
  ACCEL_DECL SnapshotTensors take(const SnapshotTensors& live);
  // Blocks until the device copies take() queued are done (nothing to wait for on the CPU).
  ACCEL_DECL void wait_until_copied();
  // The bytes of host memory the buffers hold.
  std::int64_t bytes() const { return bytes_; }
  // Frees the buffers (Accelerator::release_memory); the next take() allocates them again. The
  // write that read them must have ended.
  void release() {
    wait_until_copied();
    buffers_.clear();
    bytes_ = 0;
  }

 private:
  struct Buffer {
    torch::Tensor data;  // one dimension, contiguous
    bool pinned = false;
  };
  ACCEL_DECL void copy_from_device(const SnapshotTensors& live, const SnapshotTensors& taken);

  std::vector<Buffer> buffers_;
  std::int64_t bytes_ = 0;
  std::shared_ptr<void> copied_;  // CUDA: the event the copy stream records after its copies
};

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/host_snapshot.ipp"
#endif
