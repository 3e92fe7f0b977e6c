// DirectGloo; direct_gloo.hpp includes it in header-only mode.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "../direct_gloo.hpp"

namespace accel::runtime {

ACCEL_DECL DirectGloo::DirectGloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                  std::shared_ptr<gloo::transport::Device> device,
                                  std::chrono::milliseconds timeout)
    : context_(std::make_shared<gloo::rendezvous::Context>(rank, size)) {
  context_->setTimeout(timeout);
  c10d::ProcessGroupGloo::GlooStore rendezvous(store);
  context_->connectFullMesh(rendezvous, device);
}

ACCEL_DECL bool DirectGloo::can_register(const torch::Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() &&
         (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble);
}

ACCEL_DECL std::unique_ptr<gloo::Algorithm> DirectGloo::ring_allreduce(torch::Tensor& flat) {
  if (flat.scalar_type() == torch::kDouble) return ring<double>(flat);
  return ring<float>(flat);
}

}  // namespace accel::runtime
