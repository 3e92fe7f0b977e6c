// For tests: a transport (transport.hpp) that wraps a real one and injects one fault into one
// collective on one rank, so that what a user sees when a collective goes wrong is tested through
// real processes rather than assumed. The fault is planned by the collective's number in the
// group (every rank numbers its collectives alike, collective_check.hpp) and the rank:
//
//   throws           the transport throws, as a transport library's own error would: the group's
//                    layer names the collective, its number and the rank (ProcessGroup::checked);
//   differs          the rank calls the collective with one element fewer: the group's
//                    same-collective check names every rank's call (Options::check_collectives);
//   never_completes  the call never returns on that rank: the peers fail at Options::timeout;
//   corrupts         the result on that rank is off by one: nothing in the group detects that,
//                    and nothing claims to (docs/concepts/failures.md).
//
// `differs` is a fault of the call rather than of its carrying, so it is applied where a rank's
// own code makes the call: in front of the layer (Faults), which is why the check sees it.
//
//   accel::testing::Faults faults(group, {.fault = accel::testing::Fault::throws,
//                                         .collective = group.collectives_issued() + 1,
//                                         .rank = 1});
//   faults.allreduce(t);  // #N: fine
//   faults.allreduce(t);  // #N+1: "accel: allreduce #N+1 (Float, shape 4) failed on rank 1: ..."
//
// Kept off the public ProcessGroup, as accel::testing::Fallbacks is: no training path takes it.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

#include "../detail/separate_compilation.hpp"
#include "collective_call.hpp"
#include "fallback_transport.hpp"
#include "pending_collective.hpp"
#include "process_group.hpp"
#include "reduce_op.hpp"
#include "transport.hpp"

namespace accel::testing {

enum class Fault { throws, differs, never_completes, corrupts };

// One fault, on collective number `collective` of the group, on rank `rank` of the group.
struct FaultPlan {
  Fault fault = Fault::throws;
  std::uint64_t collective = 0;
  int rank = 0;

  bool at(std::uint64_t sequence, int on_rank) const {
    return sequence == collective && on_rank == rank;
  }
  // What the rank calls the collective with: `tensor`, or with `differs` at this collective on
  // this rank, its flat layout less the last element (which the same-collective check names).
  torch::Tensor as_called(std::uint64_t sequence, int on_rank, const torch::Tensor& tensor) const {
    if (fault != Fault::differs || !at(sequence, on_rank) || !tensor.defined() ||
        tensor.numel() == 0)
      return tensor;
    return tensor.reshape(-1).narrow(0, 0, tensor.numel() - 1);
  }
};

// The wrapper: every member forwards to `inner`, the one planned collective on the planned rank
// first meeting its fault. A template over the wrapped transport, as the group's layer is.
template <runtime::Transport T>
class FaultTransport {
 public:
  FaultTransport(T& inner, FaultPlan plan, int rank) : inner_(inner), plan_(plan), rank_(rank) {}

  bool carries(runtime::CollectiveOp op, const torch::Tensor& t) const {
    return inner_.carries(op, t);
  }
  bool starts(runtime::CollectiveOp op, const torch::Tensor& t) const {
    return inner_.starts(op, t);
  }
  void barrier(const runtime::CollectiveCall& call) {
    before(call);
    inner_.barrier(call);
  }
  void allreduce(torch::Tensor& tensor, runtime::ReduceOp op, const runtime::CollectiveCall& call) {
    before(call);
    inner_.allreduce(tensor, op, call);
    after(call, tensor);
  }
  void broadcast(torch::Tensor& tensor, int root, const runtime::CollectiveCall& call) {
    before(call);
    inner_.broadcast(tensor, root, call);
    after(call, tensor);
  }
  torch::Tensor allgather(const torch::Tensor& input, const runtime::CollectiveCall& call) {
    before(call);
    torch::Tensor result = inner_.allgather(input, call);
    after(call, result);
    return result;
  }
  void allgather_into(torch::Tensor& output, const torch::Tensor& input,
                      const runtime::CollectiveCall& call) {
    before(call);
    inner_.allgather_into(output, input, call);
    after(call, output);
  }
  torch::Tensor reduce_scatter(const torch::Tensor& input, runtime::ReduceOp op,
                               const runtime::CollectiveCall& call) {
    before(call);
    torch::Tensor result = inner_.reduce_scatter(input, op, call);
    after(call, result);
    return result;
  }
  // A started collective that is to be corrupted is waited for here, so that its result exists
  // to be corrupted; the handle comes back done.
  runtime::PendingCollective start_allreduce(const torch::Tensor& sent,
                                             const runtime::CollectiveCall& call) {
    before(call);
    return finished(inner_.start_allreduce(sent, call), call, sent);
  }
  runtime::PendingCollective start_allgather_into(torch::Tensor& output, const torch::Tensor& input,
                                                  const runtime::CollectiveCall& call) {
    before(call);
    return finished(inner_.start_allgather_into(output, input, call), call, output);
  }
  runtime::PendingCollective start_reduce_scatter(const torch::Tensor& input, torch::Tensor& into,
                                                  runtime::ReduceOp op,
                                                  const runtime::CollectiveCall& call) {
    before(call);
    runtime::PendingCollective pending = inner_.start_reduce_scatter(input, into, op, call);
    if (!corrupts(call)) return pending;
    pending.wait();
    after(call, pending.result.defined() ? pending.result : into);
    return pending;
  }

 private:
  bool corrupts(const runtime::CollectiveCall& call) const {
    return plan_.fault == Fault::corrupts && plan_.at(call.sequence, rank_);
  }
  // The faults that strike before anything is sent.
  void before(const runtime::CollectiveCall& call) {
    if (!plan_.at(call.sequence, rank_)) return;
    if (plan_.fault == Fault::throws)
      throw std::runtime_error(fmt::format("the transport failed (a fault that "
                                           "accel::testing::FaultTransport injected into #{})",
                                           call.sequence));
    // A transport that never returns, as one whose peer's network is gone without a word: only
    // the end of the process ends the call.
    if (plan_.fault == Fault::never_completes)
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  void after(const runtime::CollectiveCall& call, const torch::Tensor& result) {
    if (!corrupts(call) || !result.defined()) return;
    torch::Tensor corrupted = result;
    if (corrupted.scalar_type() == torch::kBool)
      corrupted.logical_not_();
    else
      corrupted.add_(1);
  }
  runtime::PendingCollective finished(runtime::PendingCollective pending,
                                      const runtime::CollectiveCall& call,
                                      const torch::Tensor& result) {
    if (!corrupts(call)) return pending;
    pending.wait();
    after(call, result);
    return pending;
  }

  T& inner_;
  FaultPlan plan_;
  int rank_;
};

// Checked where the wrapped transport is complete: here over the test transport, in
// impl/fault_transport.ipp over the group's own.
static_assert(runtime::Transport<FaultTransport<FallbackTransport>>,
              "internal: FaultTransport must offer every collective the group routes "
              "(transport.hpp)");

// The group's blocking collectives with `plan`'s fault: routed as the group routes them (shared
// memory where it carries the tensor, else c10d), the transport wrapped in a FaultTransport, run
// through the group's one layer (numbered, checked, spanned, failures named).
class Faults {
 public:
  ACCEL_DECL Faults(runtime::ProcessGroup& group, FaultPlan plan);

  ACCEL_DECL void barrier();
  ACCEL_DECL void allreduce(torch::Tensor& tensor, runtime::ReduceOp op = runtime::ReduceOp::sum);
  ACCEL_DECL torch::Tensor allgather(const torch::Tensor& tensor);

 private:
  template <class Run>
  decltype(auto) collective(runtime::CollectiveOp op, const char* name, const torch::Tensor& tensor,
                            Run&& run);

  runtime::ProcessGroup& group_;
  FaultPlan plan_;
};

}  // namespace accel::testing

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/fault_transport.ipp"
#endif
