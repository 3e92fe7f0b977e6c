// Faults; fault_transport.hpp includes it in header-only mode.
#pragma once

#include "../c10d_transport.hpp"
#include "../fault_transport.hpp"
#include "../../runtime/shared_memory_path.hpp"
#include "process_group.ipp"

namespace accel::testing {

using runtime::CollectiveCall;
using runtime::CollectiveOp;

static_assert(runtime::Transport<FaultTransport<runtime::C10dTransport>>,
              "internal: FaultTransport must offer every collective the group routes "
              "(transport.hpp)");
static_assert(runtime::Transport<FaultTransport<runtime::SharedMemoryPath>>,
              "internal: FaultTransport must offer every collective the group routes "
              "(transport.hpp)");

ACCEL_DECL Faults::Faults(runtime::ProcessGroup& group, FaultPlan plan)
    : group_(group), plan_(plan) {}

// The group's own composition (ProcessGroup::collective), with the fault wrapped around the
// transport that routed() picks, between the routing and the layer.
template <class Run>
decltype(auto) Faults::collective(CollectiveOp op, const char* name, const torch::Tensor& tensor,
                                  Run&& run) {
  return group_.routed(op, tensor, /*starting=*/false, [&](auto& transport) -> decltype(auto) {
    FaultTransport<std::remove_reference_t<decltype(transport)>> faulty(transport, plan_,
                                                                        group_.rank());
    return group_.checked(faulty, name, name, tensor, /*started=*/false, run);
  });
}

ACCEL_DECL void Faults::barrier() {
  collective(CollectiveOp::barrier, "barrier", {},
             [](auto& transport, const CollectiveCall& call) { transport.barrier(call); });
}

ACCEL_DECL void Faults::allreduce(torch::Tensor& tensor, runtime::ReduceOp op) {
  runtime::check_reducible(tensor, op);
  torch::Tensor called = plan_.as_called(group_.collectives_issued(), group_.rank(), tensor);
  collective(CollectiveOp::allreduce, "allreduce", called,
             [&](auto& transport, const CollectiveCall& call) {
               transport.allreduce(called, op, call);
             });
}

ACCEL_DECL torch::Tensor Faults::allgather(const torch::Tensor& tensor) {
  const torch::Tensor input = runtime::ProcessGroup::gather_input(
      plan_.as_called(group_.collectives_issued(), group_.rank(), tensor));
  return collective(CollectiveOp::allgather, "allgather", input,
                    [&](auto& transport, const CollectiveCall& call) {
                      return transport.allgather(input, call);
                    });
}

}  // namespace accel::testing
