// A sum all-reduce of one tensor whose buffers are registered with Gloo once and which then
// runs on the calling thread (direct_gloo.hpp): the fast path for small, reused tensors such as
// Ddp's small gradient buckets. Where the group carries CPU tensors through shared memory, that
// is faster still, and run() goes there instead. Registering is collective
// (ProcessGroup::register_allreduce); run() blocks until every rank's sum is in, numbered and
// checked as the group's other collectives.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <utility>

#include "c10d_transport.hpp"
#include "collective_call.hpp"
#include "collective_check.hpp"
#include "shared_memory_path.hpp"

namespace accel::runtime {

class RegisteredAllreduce {
 public:
  RegisteredAllreduce() = default;
  // `flat`: what DirectGloo::can_register accepts; it must keep its storage while this lives.
  // `path`: the group's shared-memory path, or null.
  RegisteredAllreduce(CollectiveCheck& calls, C10dTransport& c10d, SharedMemoryPath* path,
                      torch::Tensor flat)
      : calls_(&calls), c10d_(&c10d), path_(path), flat_(std::move(flat)) {
    if (path_ == nullptr) ring_ = c10d_->register_ring(flat_);
  }

  void run() {
    const CollectiveCall call = (*calls_)("allreduce", flat_, *c10d_);
    if (ring_)
      c10d_->run(*ring_, call);
    else
      path_->allreduce(flat_, *shared_memory_type(flat_), shm::Reduction::sum, call);
  }

 private:
  CollectiveCheck* calls_ = nullptr;
  C10dTransport* c10d_ = nullptr;
  SharedMemoryPath* path_ = nullptr;
  torch::Tensor flat_;
  std::unique_ptr<gloo::Algorithm> ring_;
};

}  // namespace accel::runtime
