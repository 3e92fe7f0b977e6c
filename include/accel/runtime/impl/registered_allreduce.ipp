// RegisteredAllreduce; registered_allreduce.hpp includes it in header-only mode.
#pragma once

#include "../../profiling/span.hpp"
#include "../c10d_transport.hpp"
#include "../collective_check.hpp"
#include "../registered_allreduce.hpp"
#include "../../runtime/shared_memory_path.hpp"

namespace accel::runtime {

ACCEL_DECL RegisteredAllreduce::RegisteredAllreduce(CollectiveCheck& calls, C10dTransport& c10d,
                                                    SharedMemoryPath* path, torch::Tensor flat)
    : calls_(&calls), c10d_(&c10d), path_(path), flat_(std::move(flat)) {
  if (path_ == nullptr) ring_ = c10d_->register_ring(flat_);
}

ACCEL_DECL RegisteredAllreduce::RegisteredAllreduce(RegisteredAllreduce&&) noexcept = default;
ACCEL_DECL RegisteredAllreduce& RegisteredAllreduce::operator=(RegisteredAllreduce&&) noexcept =
    default;
ACCEL_DECL RegisteredAllreduce::~RegisteredAllreduce() = default;

ACCEL_DECL void RegisteredAllreduce::run() {
  const CollectiveCall call = (*calls_)("allreduce", flat_, *c10d_);
  const profiling::Span span(profiling::Phase::communication, "allreduce",
                             static_cast<std::int64_t>(call.sequence),
                             static_cast<std::int64_t>(flat_.nbytes()));
  if (ring_)
    c10d_->run(*ring_, call);
  else
    path_->allreduce(flat_, ReduceOp::sum, call);
}

}  // namespace accel::runtime
