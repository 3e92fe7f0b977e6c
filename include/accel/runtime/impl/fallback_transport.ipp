// FallbackTransport and Fallbacks; fallback_transport.hpp includes it in header-only mode.
#pragma once

#include "../c10d_transport.hpp"
#include "../fallback_transport.hpp"
#include "process_group.ipp"

namespace accel::testing {

using runtime::CollectiveCall;
using runtime::PendingCollective;

ACCEL_DECL void FallbackTransport::barrier(const CollectiveCall& call) { c10d_.barrier(call); }

ACCEL_DECL void FallbackTransport::allreduce(torch::Tensor& tensor, runtime::ReduceOp op,
                                             const CollectiveCall& call) {
  c10d_.allreduce(tensor, op, call);
}

ACCEL_DECL void FallbackTransport::broadcast(torch::Tensor& tensor, int root,
                                             const CollectiveCall& call) {
  c10d_.broadcast(tensor, root, call);
}

ACCEL_DECL torch::Tensor FallbackTransport::allgather(const torch::Tensor& input,
                                                      const CollectiveCall& call) {
  return c10d_.allgather_by_list(input, call);
}

ACCEL_DECL void FallbackTransport::allgather_into(torch::Tensor& output, const torch::Tensor& input,
                                                  const CollectiveCall& call) {
  torch::Tensor flat_output = output.view(-1);
  c10d_.allgather_into_by_list(flat_output, input, call);
}

ACCEL_DECL torch::Tensor FallbackTransport::reduce_scatter(const torch::Tensor& flat,
                                                           runtime::ReduceOp op,
                                                           const CollectiveCall& call) {
  return c10d_.reduce_scatter_by_alltoall(flat, op, call);
}

ACCEL_DECL PendingCollective FallbackTransport::start_allreduce(const torch::Tensor& sent,
                                                                const CollectiveCall& call) {
  torch::Tensor tensor = sent;
  allreduce(tensor, runtime::ReduceOp::sum, call);
  return {};
}

ACCEL_DECL PendingCollective FallbackTransport::start_allgather_into(torch::Tensor& output,
                                                                     const torch::Tensor& input,
                                                                     const CollectiveCall& call) {
  allgather_into(output, input, call);
  return {};
}

ACCEL_DECL PendingCollective FallbackTransport::start_reduce_scatter(const torch::Tensor& input,
                                                                     torch::Tensor& /*into*/,
                                                                     runtime::ReduceOp op,
                                                                     const CollectiveCall& call) {
  PendingCollective done;
  done.result = reduce_scatter(input.reshape(-1), op, call);
  return done;
}

ACCEL_DECL Fallbacks::Fallbacks(runtime::ProcessGroup& group)
    : group_(group), transport_(*group.c10d_) {}

ACCEL_DECL torch::Tensor Fallbacks::allgather(const torch::Tensor& tensor) {
  const torch::Tensor input = runtime::ProcessGroup::gather_input(tensor);
  return group_.checked(transport_, "allgather", "allgather", tensor, false,
                        [&](FallbackTransport& t, const CollectiveCall& call) {
                          return t.allgather(input, call);
                        });
}

ACCEL_DECL void Fallbacks::allgather_into(torch::Tensor& output, const torch::Tensor& input) {
  group_.checked(transport_, "allgather", "allgather", input, false,
                 [&](FallbackTransport& t, const CollectiveCall& call) {
                   group_.check_gather_layout(output, input);
                   t.allgather_into(output, input, call);
                 });
}

ACCEL_DECL torch::Tensor Fallbacks::reduce_scatter(const torch::Tensor& input,
                                                   runtime::ReduceOp op) {
  runtime::check_reduce_scatter(input, op, group_.size());
  const torch::Tensor flat = input.contiguous().view(-1);
  return group_.checked(transport_, "reduce_scatter", "reduce_scatter", input, false,
                        [&](FallbackTransport& t, const CollectiveCall& call) {
                          return t.reduce_scatter(flat, op, call);
                        });
}

}  // namespace accel::testing
