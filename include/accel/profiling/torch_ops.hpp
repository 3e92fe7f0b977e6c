// libtorch's own profiler, for its operator events (aten::mm, autograd::engine::evaluate_function:
// MmBackward0, ...) in accel's trace. Through the API that torch.profiler uses
// (torch::autograd::profiler::prepareProfiler / enableProfiler / disableProfiler with
// ProfilerState::KINETO): on 1.13 and 2.x alike it collects CPU operator events with or without
// libkineto (Debian's 1.13 has none, and then no GPU kernels: docs/how-to/profiling.md). Thread-local, as
// torch's: the thread that starts it is profiled, with the threads libtorch hands its work to
// (autograd's, intra-op workers).
#pragma once

#include <vector>

#include "../detail/separate_compilation.hpp"
#include "records.hpp"

namespace accel::profiling {

class TorchOps {
 public:
  TorchOps() = default;
  TorchOps(const TorchOps&) = delete;
  TorchOps& operator=(const TorchOps&) = delete;
  // Stops without keeping anything if still running.
  ACCEL_DECL ~TorchOps();

  // Fails (naming the cause) when libtorch's profiler is already on in this thread, e.g. under
  // a torch.profiler of a caller's own.
  ACCEL_DECL void start();
  // The events since start(), on the system clock.
  ACCEL_DECL std::vector<OpRecord> stop();
  bool running() const { return running_; }

 private:
  bool running_ = false;
};

}  // namespace accel::profiling

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/torch_ops.ipp"
#endif
