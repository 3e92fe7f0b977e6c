// RegisteredAllreduce; registered_allreduce.hpp includes it in header-only mode.
#pragma once

#include "../c10d_transport.hpp"
#include "../process_group.hpp"
#include "../registered_allreduce.hpp"
#include "process_group.ipp"

namespace accel::runtime {

ACCEL_DECL RegisteredAllreduce::RegisteredAllreduce(ProcessGroup& group, torch::Tensor flat)
    : group_(&group), flat_(std::move(flat)) {
  if (!group.uses_shared_memory()) ring_ = group.c10d_->register_ring(flat_);
}

ACCEL_DECL RegisteredAllreduce::RegisteredAllreduce(RegisteredAllreduce&&) noexcept = default;
ACCEL_DECL RegisteredAllreduce& RegisteredAllreduce::operator=(RegisteredAllreduce&&) noexcept =
    default;
ACCEL_DECL RegisteredAllreduce::~RegisteredAllreduce() = default;

ACCEL_DECL void RegisteredAllreduce::run() {
  if (!ring_) {
    group_->allreduce(flat_);  // shared memory, faster still
    return;
  }
  group_->checked(*group_->c10d_, "allreduce", "allreduce", flat_, /*started=*/false,
                  [&](C10dTransport& c10d, const CollectiveCall& call) { c10d.run(*ring_, call); });
}

}  // namespace accel::runtime
