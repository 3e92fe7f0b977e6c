// What a transport offers the group (process_group.hpp), stated once as a concept: the shared-
// memory path (shared_memory_path.hpp), c10d's Gloo and NCCL (c10d_transport.hpp) and the test
// transport over c10d's fallbacks (fallback_transport.hpp) each satisfy it, checked by
// static_asserts where the group routes to them (impl/process_group.ipp, fallback_transport.hpp)
// and in the layer itself (ProcessGroup::checked). The group numbers, checks and spans every
// collective once, picks the transport that carries it (carries(), starts()), and calls one of
// these members; a member names its failures after `call`. A concept, not a virtual base: the
// group's layer is a template over the transport, so every call is direct and inlinable (c10d
// puts the same checking in one decorator, ProcessGroupWrapper, over a virtual Backend).
#pragma once

#include <torch/torch.h>

#include <concepts>

#include "collective_call.hpp"
#include "pending_collective.hpp"
#include "reduce_op.hpp"

namespace accel::runtime {

// The collectives the group routes, as carries() and starts() are asked about them.
enum class CollectiveOp { barrier, allreduce, reduce_scatter, broadcast, allgather };

template <class T>
concept Transport = requires(T& transport, const T& held, torch::Tensor& tensor,
                             const torch::Tensor& input, ReduceOp op, int root,
                             const CollectiveCall& call) {
  // Whether it carries `op` on `input` blocking, and whether it starts it (start_ below).
  { held.carries(CollectiveOp::allreduce, input) } -> std::same_as<bool>;
  { held.starts(CollectiveOp::allreduce, input) } -> std::same_as<bool>;
  // Blocking, on the calling thread behind the collectives started before.
  { transport.barrier(call) } -> std::same_as<void>;
  // In place; mean divides the sum by the ranks.
  { transport.allreduce(tensor, op, call) } -> std::same_as<void>;
  // The root's tensor on every rank; a rank that passed another dtype or shape fails.
  { transport.broadcast(tensor, root, call) } -> std::same_as<void>;
  // Every rank's `input` (contiguous, at least 1-D) along dimension 0, in rank order.
  { transport.allgather(input, call) } -> std::same_as<torch::Tensor>;
  // The same into `tensor` (contiguous, ranks x input's elements); input may alias its slot.
  { transport.allgather_into(tensor, input, call) } -> std::same_as<void>;
  // This rank's chunk of `input` (contiguous, ranks equal chunks), reduced over the ranks.
  { transport.reduce_scatter(input, op, call) } -> std::same_as<torch::Tensor>;
  // Started, waited for through the one pending type: sum all-reduce in place; all-gather into
  // `tensor`; reduce-scatter into `tensor` where given and the transport can (else its own).
  { transport.start_allreduce(input, call) } -> std::same_as<PendingCollective>;
  { transport.start_allgather_into(tensor, input, call) } -> std::same_as<PendingCollective>;
  { transport.start_reduce_scatter(input, tensor, op, call) } -> std::same_as<PendingCollective>;
};

}  // namespace accel::runtime
