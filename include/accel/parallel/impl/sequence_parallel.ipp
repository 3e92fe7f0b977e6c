// Sequence parallelism's four autograd functions and its two marks' forwards
// (sequence_parallel.hpp includes this file in header-only mode).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../../detail/error.hpp"
#include "../../detail/shape_text.hpp"
#include "../sequence_parallel.hpp"
#include "../tensor_parallel_linear.hpp"

namespace accel {

namespace parallel::detail {

// The group travels to backward in the context's saved data as an integer, as the split layers'
// does (their ipp's group_key, not reachable from here in header-only mode's include order): the
// group outlives every graph.
inline void save_group(torch::autograd::AutogradContext* ctx, runtime::ProcessGroup& group) {
  ctx->saved_data["group"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(&group));
}
inline runtime::ProcessGroup& saved_group(const torch::autograd::AutogradContext* ctx) {
  return *reinterpret_cast<runtime::ProcessGroup*>(
      static_cast<std::intptr_t>(ctx->saved_data.at("group").toInt()));
}

// An input with a sequence dimension (1) that `parts` ranks can share: refused otherwise, with
// the shape, on every rank alike (each holds the same shape).
inline void check_sequence(const torch::Tensor& input, std::int64_t parts, std::string_view who) {
  if (input.dim() < 2)
    accel::detail::fail("{}: sequence parallelism splits dimension 1 of [batch, sequence, ...] "
                        "activations, and this one has shape [{}]; give the model's sequence "
                        "layers inputs of that layout, or leave out the sequence-parallel marks",
                        who, accel::detail::shape_text(input.sizes()));
  if (input.size(1) % parts != 0)
    accel::detail::fail("{}: a sequence of {} (dimension 1 of [{}]) does not split across the "
                        "tensor-parallel degree {}; make the sequence length a multiple of {}",
                        who, input.size(1), accel::detail::shape_text(input.sizes()), parts,
                        parts);
}

// Every rank's part joined along dimension 1, in rank order.
inline torch::Tensor all_gather_dim1(runtime::ProcessGroup& group, const torch::Tensor& part) {
  return group.allgather(part.transpose(0, 1).contiguous()).transpose(0, 1).contiguous();
}
// The sum over the group, each rank keeping its part of dimension 1.
inline torch::Tensor reduce_scatter_dim1(runtime::ProcessGroup& group, const torch::Tensor& whole) {
  std::vector<std::int64_t> sizes = whole.transpose(0, 1).sizes().vec();
  sizes[0] /= group.size();
  return group.reduce_scatter(whole.transpose(0, 1).contiguous())
      .view(sizes)
      .transpose(0, 1)
      .contiguous();
}
// This rank's part of dimension 1, a tensor of its own.
inline torch::Tensor part_dim1(runtime::ProcessGroup& group, const torch::Tensor& whole) {
  const std::int64_t count = whole.size(1) / group.size();
  return whole.narrow(1, group.rank() * count, count).clone(at::MemoryFormat::Contiguous);
}

struct AllGatherSequence : torch::autograd::Function<AllGatherSequence> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               runtime::ProcessGroup* group) {
    save_group(ctx, *group);
    return all_gather_dim1(*group, input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {reduce_scatter_dim1(saved_group(ctx), grads[0]), torch::Tensor()};
  }
};

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               runtime::ProcessGroup* group) {
    save_group(ctx, *group);
    return reduce_scatter_dim1(*group, input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {all_gather_dim1(saved_group(ctx), grads[0]), torch::Tensor()};
  }
};

struct ScatterToSequence : torch::autograd::Function<ScatterToSequence> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               runtime::ProcessGroup* group) {
    save_group(ctx, *group);
    return part_dim1(*group, input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {all_gather_dim1(saved_group(ctx), grads[0]), torch::Tensor()};
  }
};

struct GatherFromSequence : torch::autograd::Function<GatherFromSequence> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               runtime::ProcessGroup* group) {
    save_group(ctx, *group);
    return all_gather_dim1(*group, input);
  }
  // What follows the gather computes the same on every rank, so the whole gradient is here
  // already: no sum, only this rank's part.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {part_dim1(saved_group(ctx), grads[0]), torch::Tensor()};
  }
};

}  // namespace parallel::detail

ACCEL_DECL torch::Tensor parallel::all_gather_sequence(const torch::Tensor& input,
                                                       runtime::ProcessGroup& group,
                                                       std::string_view who) {
  detail::check_sequence(input, 1, who);
  return detail::AllGatherSequence::apply(input, &group);
}

ACCEL_DECL torch::Tensor parallel::reduce_scatter_sequence(const torch::Tensor& input,
                                                           runtime::ProcessGroup& group,
                                                           std::string_view who) {
  detail::check_sequence(input, group.size(), who);
  return detail::ReduceScatterSequence::apply(input, &group);
}

ACCEL_DECL torch::Tensor parallel::scatter_to_sequence(const torch::Tensor& input,
                                                       runtime::ProcessGroup& group,
                                                       std::string_view who) {
  detail::check_sequence(input, group.size(), who);
  return detail::ScatterToSequence::apply(input, &group);
}

ACCEL_DECL torch::Tensor parallel::gather_from_sequence(const torch::Tensor& input,
                                                        runtime::ProcessGroup& group,
                                                        std::string_view who) {
  detail::check_sequence(input, 1, who);
  return detail::GatherFromSequence::apply(input, &group);
}

ACCEL_DECL torch::Tensor parallel::summed_in_backward(const torch::Tensor& parameter,
                                                      runtime::ProcessGroup& group) {
  return copy_to_tensor_parallel(parameter, group);
}

ACCEL_DECL bool parallel::place_sequence_parallel_marks(torch::nn::Module& module,
                                                        runtime::ProcessGroup& group) {
  bool any = false;
  for (const auto& child : module.modules(/*include_self=*/true))
    if (auto* mark = dynamic_cast<SequenceParallelMark*>(child.get())) {
      mark->sequence_group = &group;
      any = true;
    }
  return any;
}

ACCEL_DECL torch::Tensor ScatterSequenceImpl::forward(const torch::Tensor& input) {
  if (sequence_group == nullptr) return input;
  return parallel::scatter_to_sequence(input, *sequence_group, "ScatterSequence");
}

ACCEL_DECL torch::Tensor GatherSequenceImpl::forward(const torch::Tensor& input) {
  if (sequence_group == nullptr) return input;
  return parallel::gather_from_sequence(input, *sequence_group, "GatherSequence");
}

}  // namespace accel
