// libtorch's profiler for operator events; torch_ops.hpp includes it in header-only mode.
#pragma once

#include <torch/csrc/autograd/profiler_kineto.h>

#include <set>

#include "../../detail/error.hpp"
#include "../../detail/torch_compat.hpp"
#include "../torch_ops.hpp"

namespace accel::profiling {

namespace detail {
inline torch::profiler::impl::ProfilerConfig torch_ops_config() {
  // KINETO is the state torch.profiler uses; without libkineto libtorch still collects CPU
  // operators in it (its own collection), which is all accel reads.
  return torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::KINETO);
}
}  // namespace detail

ACCEL_DECL TorchOps::~TorchOps() {
  if (!running_) return;
  try {
    (void)torch::autograd::profiler::disableProfiler();
  } catch (const std::exception&) {
    // Dropping the events is all that is left to do.
  }
}

ACCEL_DECL void TorchOps::start() {
  if (torch::autograd::profiler::profilerEnabled())
    accel::detail::fail("profile(): libtorch's profiler is already running on this thread (a "
                        "profiler of your own?); stop it first, or profile with "
                        "ProfileOptions::torch_ops = false for accel's spans only");
  const std::set<torch::profiler::impl::ActivityType> activities{
      torch::profiler::impl::ActivityType::CPU};
  torch::autograd::profiler::prepareProfiler(detail::torch_ops_config(), activities);
  torch::autograd::profiler::enableProfiler(detail::torch_ops_config(), activities);
  running_ = true;
}

ACCEL_DECL std::vector<OpRecord> TorchOps::stop() {
  if (!running_) return {};
  running_ = false;
  const auto result = torch::autograd::profiler::disableProfiler();
  std::vector<OpRecord> ops;
  if (!result) return ops;
  ops.reserve(result->events().size());
  for (const auto& event : result->events()) {
    if (event.deviceType() != c10::DeviceType::CPU) continue;
    const std::int64_t start = accel::detail::profiler_event_start_ns(event);
    ops.push_back({event.name(), start, start + accel::detail::profiler_event_duration_ns(event),
                   event.startThreadId()});
  }
  return ops;
}

}  // namespace accel::profiling
