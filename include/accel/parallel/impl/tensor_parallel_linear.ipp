// The tensor-parallel layers and their two autograd functions (tensor_parallel_linear.hpp
// includes this file in header-only mode).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "../../detail/error.hpp"
#include "../sequence_parallel.hpp"
#include "../tensor_parallel_linear.hpp"

namespace accel {

namespace parallel::detail {

// The group travels to backward as an integer: AutogradContext keeps IValues, and the group
// outlives every graph built while the Accelerator lives.
inline std::int64_t group_key(runtime::ProcessGroup& group) {
  return static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(&group));
}
inline runtime::ProcessGroup& group_of(const torch::autograd::AutogradContext& ctx) {
  return *reinterpret_cast<runtime::ProcessGroup*>(
      static_cast<std::intptr_t>(ctx.saved_data.at("group").toInt()));
}

// The sum over the group of a copy of `tensor`: the tensors autograd hands over are not ours to
// change in place.
inline torch::Tensor summed_over(runtime::ProcessGroup& group, const torch::Tensor& tensor) {
  torch::Tensor sum = tensor.clone(at::MemoryFormat::Contiguous);
  group.allreduce(sum);
  return sum;
}

struct CopyToTensorParallel : torch::autograd::Function<CopyToTensorParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               runtime::ProcessGroup* group) {
    ctx->saved_data["group"] = group_key(*group);
    return input;  // autograd returns an input as a view with this function's gradient edge
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    return {summed_over(group_of(*ctx), grad_outputs[0]), torch::Tensor()};
  }
};

struct ReduceFromTensorParallel : torch::autograd::Function<ReduceFromTensorParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext* /*ctx*/,
                               const torch::Tensor& input, runtime::ProcessGroup* group) {
    return summed_over(*group, input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grad_outputs) {
    return {grad_outputs[0], torch::Tensor()};
  }
};

// The weight and bias of a torch::nn::Linear of `options`, registered on `layer`: the same draws
// from the generator, in the same order, as the Linear itself would make.
inline void register_linear_parameters(torch::nn::Module& layer,
                                       const torch::nn::LinearOptions& options,
                                       torch::Tensor& weight, torch::Tensor& bias) {
  torch::nn::Linear full(options);
  weight = layer.register_parameter("weight", full->weight);
  bias = options.bias() ? layer.register_parameter("bias", full->bias)
                        : layer.register_parameter("bias", {}, /*requires_grad=*/false);
}

// This rank's share of `full` along `dim` as a copy: of `fused` projections side by side there
// (FusedOutputs), its rows of each one, in order; of one, a contiguous 1/N.
inline torch::Tensor share_of(const torch::Tensor& full, std::int64_t dim, std::int64_t fused,
                              int rank, int ranks) {
  std::vector<std::int64_t> sizes = full.sizes().vec();
  const auto at = static_cast<std::size_t>(dim);
  const std::int64_t count = sizes[at] / (fused * ranks);
  // [..., fused, ranks, count, ...]: this rank's `count` of each projection.
  std::vector<std::int64_t> parts(sizes.begin(), sizes.begin() + dim);
  parts.insert(parts.end(), {fused, ranks, count});
  parts.insert(parts.end(), sizes.begin() + dim + 1, sizes.end());
  sizes[at] = fused * count;
  return full.reshape(parts).select(dim + 1, rank).reshape(sizes).clone(
      at::MemoryFormat::Contiguous);
}

// Each defined tensor of a layer cut to this rank's share of `dim`, in place: the optimizer holds
// the Parameter, not its storage.
inline void keep_shares(std::initializer_list<torch::Tensor*> tensors, std::int64_t dim,
                        std::int64_t fused, runtime::ProcessGroup& group) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor* tensor : tensors)
    if (tensor->defined())
      tensor->set_data(share_of(tensor->detach(), dim, fused, group.rank(), group.size()));
}

// Every rank's share of each defined tensor along `dim`, put back in the full layout (rank order,
// or each projection's shares in rank order), in place; each slice's own tensor kept in `held`
// (gathered already: nothing to do).
inline void gather_shares(std::initializer_list<torch::Tensor*> tensors, std::int64_t dim,
                          std::int64_t fused, TensorParallelPlace& place) {
  if (!place.held.empty()) return;
  torch::NoGradGuard no_grad;
  const std::int64_t ranks = place.group->size();
  for (torch::Tensor* tensor : tensors)
    if (tensor->defined()) {
      place.held.push_back(tensor->detach());
      const torch::Tensor mine = tensor->detach().transpose(0, dim).contiguous();
      // [ranks x fused x count, ...] in rank order, to [fused x ranks x count, ...].
      const torch::Tensor all = place.group->allgather(mine);
      std::vector<std::int64_t> parts = all.sizes().vec();
      parts[0] = all.size(0) / (ranks * fused);
      parts.insert(parts.begin(), {ranks, fused});
      tensor->set_data(all.reshape(parts).transpose(0, 1).reshape(all.sizes()).transpose(0, dim)
                           .contiguous());
    }
}

// The full tensors' share of this rank written into the slices' own tensors, which the
// parameters become again: set_data to a copy would leave a flat buffer (Zero2, Zero3) that the
// parameters no longer view.
inline void return_shares(std::initializer_list<torch::Tensor*> tensors, std::int64_t dim,
                          std::int64_t fused, TensorParallelPlace& place) {
  if (place.held.empty()) return;
  torch::NoGradGuard no_grad;
  std::size_t k = 0;
  for (torch::Tensor* tensor : tensors)
    if (tensor->defined()) {
      torch::Tensor& slice = place.held[k++];
      slice.copy_(share_of(tensor->detach(), dim, fused, place.group->rank(),
                           place.group->size()));
      tensor->set_data(slice);
    }
  place.held.clear();
}

inline void check_divides(std::int64_t features, const char* which, const char* layer,
                          runtime::ProcessGroup& group, const std::string& path) {
  if (features % group.size() != 0)
    accel::detail::fail("{}: {} '{}' has {} {}, which the tensor-parallel degree {} does not "
                        "divide; make {} a multiple of {} (or use a degree that divides {})",
                        "prepare()", layer, path, which, features, group.size(), which,
                        group.size(), features);
}

// A fused layer's projections each split across the group: each holds a multiple of its size.
inline void check_fused_divides(std::int64_t features, std::int64_t fused,
                                runtime::ProcessGroup& group, const std::string& path) {
  if (fused > 1 && (features / fused) % group.size() != 0)
    accel::detail::fail("prepare(): ColumnParallelLinear '{}' has out_features {} as FusedOutputs"
                        "{{{}}} of {} each, which the tensor-parallel degree {} does not divide; "
                        "make each output a multiple of {} (or use a degree that divides {})",
                        path, features, fused, features / fused, group.size(), group.size(),
                        features / fused);
}

}  // namespace parallel::detail

ACCEL_DECL void parallel::check_fused_outputs(std::int64_t out_features, std::int64_t count) {
  if (count < 1 || out_features % count != 0)
    accel::detail::fail("ColumnParallelLinear: FusedOutputs{{{}}} does not divide out_features "
                        "{}; give a count of at least 1 that divides the output features (3 for "
                        "a fused query, key and value of out_features / 3 each)",
                        count, out_features);
}

ACCEL_DECL torch::Tensor parallel::copy_to_tensor_parallel(const torch::Tensor& input,
                                                           runtime::ProcessGroup& group) {
  return detail::CopyToTensorParallel::apply(input, &group);
}

ACCEL_DECL torch::Tensor parallel::reduce_from_tensor_parallel(const torch::Tensor& input,
                                                               runtime::ProcessGroup& group) {
  return detail::ReduceFromTensorParallel::apply(input, &group);
}

// --- ColumnParallelLinear ----------------------------------------------------------------------

ACCEL_DECL void ColumnParallelLinearImpl::reset() {
  parallel::detail::register_linear_parameters(*this, options, weight, bias);
  place_ = {};
}

ACCEL_DECL void ColumnParallelLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "accel::ColumnParallelLinear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << options.bias();
  if (fused.count > 1) stream << ", fused=" << fused.count;
  if (place_.split())
    stream << ", rows " << weight.size(0) << " of " << options.out_features() << " on rank "
           << place_.group->rank() << " of " << place_.group->size();
  stream << ")";
}

ACCEL_DECL torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& input) {
  if (!place_.split()) return place_.product(input, weight, bias);
  // Under sequence parallelism the gather's backward reduce-scatters the input's gradient: the
  // sum f would take, each rank keeping its part of the sequence.
  const torch::Tensor whole =
      place_.sequence ? parallel::all_gather_sequence(input, *place_.group,
                                                      "ColumnParallelLinear")
                      : parallel::copy_to_tensor_parallel(input, *place_.group);
  return place_.product(whole, weight, bias);
}

ACCEL_DECL void ColumnParallelLinearImpl::split(runtime::ProcessGroup& group,
                                                const std::string& path, bool sequence) {
  if (place_.split()) return;  // prepared before
  parallel::detail::check_divides(options.out_features(), "out_features", "ColumnParallelLinear",
                                  group, path);
  parallel::detail::check_fused_divides(options.out_features(), fused.count, group, path);
  parallel::detail::keep_shares({&weight, &bias}, 0, fused.count, group);
  place_.group = &group;
  place_.sequence = sequence;
}

ACCEL_DECL void ColumnParallelLinearImpl::gather_full() {
  if (place_.split()) parallel::detail::gather_shares({&weight, &bias}, 0, fused.count, place_);
}

ACCEL_DECL void ColumnParallelLinearImpl::release_full() {
  if (place_.split()) parallel::detail::return_shares({&weight, &bias}, 0, fused.count, place_);
}

// --- RowParallelLinear -------------------------------------------------------------------------

ACCEL_DECL void RowParallelLinearImpl::reset() {
  parallel::detail::register_linear_parameters(*this, options, weight, bias);
  place_ = {};
}

ACCEL_DECL void RowParallelLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "accel::RowParallelLinear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << options.bias();
  if (place_.split())
    stream << ", columns " << weight.size(1) << " of " << options.in_features() << " on rank "
           << place_.group->rank() << " of " << place_.group->size();
  stream << ")";
}

ACCEL_DECL torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& input) {
  if (!place_.split()) return place_.product(input, weight, bias);
  const torch::Tensor partial = place_.product(input, weight, {});
  if (!place_.sequence) {
    const torch::Tensor sum = parallel::reduce_from_tensor_parallel(partial, *place_.group);
    return bias.defined() ? sum + bias : sum;
  }
  // This rank's part of the sequence, summed; the bias meets only those tokens, so its gradient
  // is summed over the group as a sequence-parallel LayerNorm's are.
  const torch::Tensor part =
      parallel::reduce_scatter_sequence(partial, *place_.group, "RowParallelLinear");
  return bias.defined() ? part + parallel::copy_to_tensor_parallel(bias, *place_.group) : part;
}

ACCEL_DECL void RowParallelLinearImpl::split(runtime::ProcessGroup& group,
                                             const std::string& path, bool sequence) {
  if (place_.split()) return;
  parallel::detail::check_divides(options.in_features(), "in_features", "RowParallelLinear",
                                  group, path);
  parallel::detail::keep_shares({&weight}, 1, 1, group);
  place_.group = &group;
  place_.sequence = sequence;
}

ACCEL_DECL void RowParallelLinearImpl::gather_full() {
  if (place_.split()) parallel::detail::gather_shares({&weight}, 1, 1, place_);
}

ACCEL_DECL void RowParallelLinearImpl::release_full() {
  if (place_.split()) parallel::detail::return_shares({&weight}, 1, 1, place_);
}

// --- The whole model -----------------------------------------------------------------------------

ACCEL_DECL std::vector<parallel::SplitParameter> parallel::split_tensor_parallel_layers(
    torch::nn::Module& module, runtime::ProcessGroup& group, const std::string& label) {
  // A model with a sequence-parallel mark runs every split layer on the sequence's parts.
  const bool sequence = place_sequence_parallel_marks(module, group);
  std::vector<SplitParameter> split;
  for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const std::string path = fmt::format("{}{}{}", label, item.key().empty() ? "" : " ",
                                         item.key().empty() ? "" : item.key());
    if (auto* column = dynamic_cast<ColumnParallelLinearImpl*>(item.value().get())) {
      column->split(group, path, sequence);
      split.push_back({column->weight, column->fused.count});
      if (column->bias.defined()) split.push_back({column->bias, column->fused.count});
    } else if (auto* row = dynamic_cast<RowParallelLinearImpl*>(item.value().get())) {
      row->split(group, path, sequence);
      split.push_back({row->weight});
    }
  }
  return split;
}

ACCEL_DECL void parallel::gather_tensor_parallel_layers(torch::nn::Module& module) {
  for (const auto& child : module.modules(/*include_self=*/true)) {
    if (auto* column = dynamic_cast<ColumnParallelLinearImpl*>(child.get())) column->gather_full();
    if (auto* row = dynamic_cast<RowParallelLinearImpl*>(child.get())) row->gather_full();
  }
}

ACCEL_DECL void parallel::release_tensor_parallel_layers(torch::nn::Module& module) {
  for (const auto& child : module.modules(/*include_self=*/true)) {
    if (auto* column = dynamic_cast<ColumnParallelLinearImpl*>(child.get())) column->release_full();
    if (auto* row = dynamic_cast<RowParallelLinearImpl*>(child.get())) row->release_full();
  }
}

}  // namespace accel
