// The tensor-parallel layers and their two autograd functions (tensor_parallel_linear.hpp
// includes this file in header-only mode).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "../../detail/error.hpp"
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

// Each defined tensor of a layer cut to this rank's share of `dim` (`features` long whole), in
// place: the optimizer holds the Parameter, not its storage.
inline void keep_shares(std::initializer_list<torch::Tensor*> tensors, std::int64_t dim,
                        std::int64_t features, runtime::ProcessGroup& group) {
  torch::NoGradGuard no_grad;
  const std::int64_t count = features / group.size();
  for (torch::Tensor* tensor : tensors)
    if (tensor->defined())
      tensor->set_data(tensor->detach().narrow(dim, group.rank() * count, count).clone());
}

// Every rank's share of each defined tensor along `dim`, joined in rank order, in place; each
// slice's own tensor kept in `held` (gathered already: nothing to do).
inline void gather_shares(std::initializer_list<torch::Tensor*> tensors, std::int64_t dim,
                          TensorParallelPlace& place) {
  if (!place.held.empty()) return;
  torch::NoGradGuard no_grad;
  for (torch::Tensor* tensor : tensors)
    if (tensor->defined()) {
      place.held.push_back(tensor->detach());
      const torch::Tensor mine = tensor->detach().transpose(0, dim).contiguous();
      tensor->set_data(place.group->allgather(mine).transpose(0, dim).contiguous());
    }
}

// The full tensors' share of this rank written into the slices' own tensors, which the
// parameters become again: set_data to a copy would leave a flat buffer (Zero2, Zero3) that the
// parameters no longer view.
inline void return_shares(std::initializer_list<torch::Tensor*> tensors, std::int64_t dim,
                          TensorParallelPlace& place) {
  if (place.held.empty()) return;
  torch::NoGradGuard no_grad;
  std::size_t k = 0;
  for (torch::Tensor* tensor : tensors)
    if (tensor->defined()) {
      torch::Tensor& slice = place.held[k++];
      slice.copy_(tensor->detach().narrow(dim, place.group->rank() * slice.size(dim),
                                          slice.size(dim)));
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

}  // namespace parallel::detail

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
  if (place_.split())
    stream << ", rows " << weight.size(0) << " of " << options.out_features() << " on rank "
           << place_.group->rank() << " of " << place_.group->size();
  stream << ")";
}

ACCEL_DECL torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& input) {
  if (!place_.split()) return torch::nn::functional::linear(input, weight, bias);
  return torch::nn::functional::linear(parallel::copy_to_tensor_parallel(input, *place_.group),
                                       weight, bias);
}

ACCEL_DECL void ColumnParallelLinearImpl::split(runtime::ProcessGroup& group,
                                                const std::string& path) {
  if (place_.split()) return;  // prepared before
  parallel::detail::check_divides(options.out_features(), "out_features", "ColumnParallelLinear",
                                  group, path);
  parallel::detail::keep_shares({&weight, &bias}, 0, options.out_features(), group);
  place_.group = &group;
}

ACCEL_DECL void ColumnParallelLinearImpl::gather_full() {
  if (place_.split()) parallel::detail::gather_shares({&weight, &bias}, 0, place_);
}

ACCEL_DECL void ColumnParallelLinearImpl::release_full() {
  if (place_.split()) parallel::detail::return_shares({&weight, &bias}, 0, place_);
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
  if (!place_.split()) return torch::nn::functional::linear(input, weight, bias);
  const torch::Tensor sum = parallel::reduce_from_tensor_parallel(
      torch::nn::functional::linear(input, weight), *place_.group);
  return bias.defined() ? sum + bias : sum;
}

ACCEL_DECL void RowParallelLinearImpl::split(runtime::ProcessGroup& group,
                                             const std::string& path) {
  if (place_.split()) return;
  parallel::detail::check_divides(options.in_features(), "in_features", "RowParallelLinear",
                                  group, path);
  parallel::detail::keep_shares({&weight}, 1, options.in_features(), group);
  place_.group = &group;
}

ACCEL_DECL void RowParallelLinearImpl::gather_full() {
  if (place_.split()) parallel::detail::gather_shares({&weight}, 1, place_);
}

ACCEL_DECL void RowParallelLinearImpl::release_full() {
  if (place_.split()) parallel::detail::return_shares({&weight}, 1, place_);
}

// --- The whole model -----------------------------------------------------------------------------

ACCEL_DECL std::vector<torch::Tensor> parallel::split_tensor_parallel_layers(
    torch::nn::Module& module, runtime::ProcessGroup& group, const std::string& label) {
  std::vector<torch::Tensor> split;
  for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const std::string path = fmt::format("{}{}{}", label, item.key().empty() ? "" : " ",
                                         item.key().empty() ? "" : item.key());
    if (auto* column = dynamic_cast<ColumnParallelLinearImpl*>(item.value().get())) {
      column->split(group, path);
      split.push_back(column->weight);
      if (column->bias.defined()) split.push_back(column->bias);
    } else if (auto* row = dynamic_cast<RowParallelLinearImpl*>(item.value().get())) {
      row->split(group, path);
      split.push_back(row->weight);
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
