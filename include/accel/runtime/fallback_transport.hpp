// For tests and the self-test (tools/self_test.hpp): the group's all-gather, all-gather into a
// buffer and reduce-scatter through c10d's portable fallbacks only (wire_fallbacks.hpp: the list
// all-gather, the alltoall reduce-scatter, bf16 through fp32), never shared memory or a backend's
// native op, so that both paths can be compared on any libtorch. They run on a transport of their
// own (FallbackTransport, over the group's c10d connections) through the group's one layer,
// numbered and checked as the group's other collectives. Kept off the public ProcessGroup: no
// training path takes them by choice.
//
//   accel::testing::Fallbacks fallbacks(group);
//   EXPECT(torch::equal(fallbacks.allgather(mine), group.allgather(mine)));
#pragma once

#include <torch/torch.h>

#include "../detail/separate_compilation.hpp"
#include "collective_call.hpp"
#include "pending_collective.hpp"
#include "process_group.hpp"
#include "reduce_op.hpp"
#include "transport.hpp"
#include "transport_declarations.hpp"

namespace accel::testing {

// The transport (transport.hpp): every collective on the group's c10d, the three that have one
// through their portable fallback. It starts nothing: the start_ members run the collective here
// and now, and their handle is done.
class FallbackTransport {
 public:
  explicit FallbackTransport(runtime::C10dTransport& c10d) : c10d_(c10d) {}

  bool carries(runtime::CollectiveOp, const torch::Tensor&) const { return true; }
  bool starts(runtime::CollectiveOp, const torch::Tensor&) const { return false; }
  ACCEL_DECL void barrier(const runtime::CollectiveCall& call);
  ACCEL_DECL void allreduce(torch::Tensor& tensor, runtime::ReduceOp op,
                            const runtime::CollectiveCall& call);
  ACCEL_DECL void broadcast(torch::Tensor& tensor, int root, const runtime::CollectiveCall& call);
  ACCEL_DECL torch::Tensor allgather(const torch::Tensor& input,
                                     const runtime::CollectiveCall& call);
  ACCEL_DECL void allgather_into(torch::Tensor& output, const torch::Tensor& input,
                                 const runtime::CollectiveCall& call);
  ACCEL_DECL torch::Tensor reduce_scatter(const torch::Tensor& flat, runtime::ReduceOp op,
                                          const runtime::CollectiveCall& call);
  ACCEL_DECL runtime::PendingCollective start_allreduce(const torch::Tensor& sent,
                                                        const runtime::CollectiveCall& call);
  ACCEL_DECL runtime::PendingCollective start_allgather_into(torch::Tensor& output,
                                                             const torch::Tensor& input,
                                                             const runtime::CollectiveCall& call);
  ACCEL_DECL runtime::PendingCollective start_reduce_scatter(const torch::Tensor& input,
                                                             torch::Tensor& into,
                                                             runtime::ReduceOp op,
                                                             const runtime::CollectiveCall& call);

 private:
  runtime::C10dTransport& c10d_;
};

static_assert(runtime::Transport<FallbackTransport>,
              "internal: FallbackTransport must offer every collective the group routes "
              "(transport.hpp)");

// The group's collectives on a FallbackTransport: what ProcessGroup's of the same names do (the
// same arguments, checks and errors), through the fallbacks.
class Fallbacks {
 public:
  ACCEL_DECL explicit Fallbacks(runtime::ProcessGroup& group);

  ACCEL_DECL torch::Tensor allgather(const torch::Tensor& tensor);
  ACCEL_DECL void allgather_into(torch::Tensor& output, const torch::Tensor& input);
  ACCEL_DECL torch::Tensor reduce_scatter(const torch::Tensor& input,
                                          runtime::ReduceOp op = runtime::ReduceOp::sum);

 private:
  runtime::ProcessGroup& group_;
  FallbackTransport transport_;
};

}  // namespace accel::testing

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/fallback_transport.ipp"
#endif
