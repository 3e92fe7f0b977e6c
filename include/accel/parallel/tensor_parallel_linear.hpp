// The layers tensor parallelism splits (Megatron-LM's), as drop-in module holders:
//
//   accel::ColumnParallelLinear   y_i = x W_i^T + b_i: rank i of the tensor-parallel group holds
//                                 rows i of the weight (output features) and of the bias, and
//                                 returns its slice of the output features
//   accel::RowParallelLinear      y = sum_i x_i W_i^T + b: rank i holds columns i of the weight
//                                 (input features), takes its slice of the input, and the
//                                 partial outputs are summed over the group; the bias is whole,
//                                 added once after the sum
//
// Column then row (the MLP's two layers, attention's qkv and output projection) needs one
// all-reduce in forward and one in backward, Megatron's conjugate operators f and g:
//
//   f (before a column layer)  forward: identity    backward: all-reduce of the input gradient
//   g (after a row layer)      forward: all-reduce  backward: identity
//
// Why layers of their own rather than torch's parallelize_module plan: libtorch's C++ modules have
// no forward hooks, and a parent's typed member (`torch::nn::Linear qkv`) cannot be swapped by
// name, so a plan could neither reroute a Linear's call nor replace it. A model that means to be
// split says so in its type; until prepare() (and on one process, and at TensorParallel<1>) the
// layers are torch::nn::Linear: the same options, the same initial numbers drawn from the same
// generator, the same parameter names and shapes, the same forward, so that one model's code and
// checkpoints serve one process and every degree. prepare() narrows each weight in place (the
// Parameter tensors the optimizer already holds) to this rank's slice of the full initialised
// weight: every degree starts from the same numbers as one process.
//
// Under Fp8 both layers compute their product in fp8 (precision/fp8.hpp attaches the scaling
// before prepare() splits them) whenever the whole layer's dimensions are multiples of 16, so
// that one process and every degree choose the same layers. Each rank quantizes its slice; the
// amaxes each rank records (of its weight slice, of its part of the input or the output
// gradient) are agreed by their maximum over every rank after each window, which the
// tensor-parallel group is part of: the maximum over the slices is the whole tensor's amax, so
// every rank uses the scale one process would.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "../precision/fp8_linear.hpp"
#include "../runtime/process_group.hpp"

namespace accel {

namespace parallel {

// A FusedOutputs{count} the out_features of a column layer do not divide: refused as it is made.
ACCEL_DECL void check_fused_outputs(std::int64_t out_features, std::int64_t count);

// Megatron's f: identity forward; the input's gradient summed over `group` in backward, since
// every rank's slice of the output contributed to it.
ACCEL_DECL torch::Tensor copy_to_tensor_parallel(const torch::Tensor& input,
                                                 runtime::ProcessGroup& group);
// Megatron's g: the partial outputs summed over `group` in forward; the gradient passes as it is
// (every rank's partial output had the whole of it).
ACCEL_DECL torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& input,
                                                     runtime::ProcessGroup& group);

// What a split layer knows of its tensor-parallel group; a layer that is not split has none.
struct TensorParallelPlace {
  runtime::ProcessGroup* group = nullptr;
  // Under sequence parallelism (sequence_parallel.hpp) a column layer gathers its input along the
  // sequence, and a row layer reduce-scatters its output along it instead of all-reducing.
  bool sequence = false;
  // While gather_full() holds the full tensors: the slices' own tensors, which release_full()
  // writes back into and restores. Their storage is the outer strategy's (a view into Zero2's
  // or Zero3's flat buffer), so a write to the full weights reaches what trains.
  std::vector<torch::Tensor> held;
  // Under Fp8: the delayed scaling of the layer's product (null: the product as Linear's).
  c10::intrusive_ptr<precision::Fp8LinearScaling> fp8;
  bool split() const { return group != nullptr; }
  // x W^T + b, in fp8 where the layer has a scaling.
  torch::Tensor product(const torch::Tensor& input, const torch::Tensor& weight,
                        const torch::Tensor& bias) const {
    return fp8 ? precision::fp8_linear(input, weight, bias, fp8)
               : torch::nn::functional::linear(input, weight, bias);
  }
};

}  // namespace parallel

/// A column layer's output features as `count` projections of out_features / count each, side
/// by side in one weight (attention's fused query, key and value: FusedOutputs{3}). Each rank
/// then holds its share of every one, in order, rather than a contiguous 1/N of the rows: with
/// the rows of each projection in head order, a rank holds whole heads of the query, the key and
/// the value alike.
struct FusedOutputs {
  std::int64_t count = 1;
};

/// torch::nn::Linear split by output features across the tensor-parallel group: after prepare()
/// each rank holds out_features / N rows of the weight and bias and returns that slice of the
/// output. Before prepare(), on one process and at TensorParallel<1>, it is a Linear.
class ColumnParallelLinearImpl : public torch::nn::Cloneable<ColumnParallelLinearImpl> {
 public:
  /// The same constructors as torch::nn::Linear.
  ColumnParallelLinearImpl(std::int64_t in_features, std::int64_t out_features)
      : ColumnParallelLinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}
  explicit ColumnParallelLinearImpl(const torch::nn::LinearOptions& options)
      : ColumnParallelLinearImpl(options, FusedOutputs{}) {}
  /// Output features that are `fused.count` projections side by side: each rank keeps its rows
  /// of each (FusedOutputs).
  ColumnParallelLinearImpl(const torch::nn::LinearOptions& options, FusedOutputs fused);

  /// Registers the full weight and bias, initialised as a Linear of these options.
  ACCEL_DECL void reset() override;
  ACCEL_DECL void pretty_print(std::ostream& stream) const override;
  ACCEL_DECL torch::Tensor forward(const torch::Tensor& input);

  /// Narrows the weight and bias in place to this rank's rows; prepare() calls it. `path` names
  /// the layer in errors (an out_features the group's size does not divide); with `sequence`
  /// its input is this rank's part of the sequence, gathered before the product.
  ACCEL_DECL void split(runtime::ProcessGroup& group, const std::string& path,
                        bool sequence = false);
  /// The full weight and bias gathered from the group, and back to this rank's rows
  /// (Accelerator::full_parameters).
  ACCEL_DECL void gather_full();
  ACCEL_DECL void release_full();
  /// Whether prepare() split it (false on one process and at TensorParallel<1>).
  bool is_split() const { return place_.split(); }
  /// Under Fp8 (prepare() attaches the scaling): the product in fp8, as accel::Fp8Linear's.
  void attach_fp8(c10::intrusive_ptr<precision::Fp8LinearScaling> scaling) {
    place_.fp8 = std::move(scaling);
  }
  bool computes_in_fp8() const { return static_cast<bool>(place_.fp8); }

  /// The full layer's options: in_features and out_features are the whole layer's.
  torch::nn::LinearOptions options;
  /// The projections its output features hold (1: one).
  FusedOutputs fused;
  /// This rank's rows once split; the full tensors before.
  torch::Tensor weight, bias;

 private:
  parallel::TensorParallelPlace place_;
};
TORCH_MODULE(ColumnParallelLinear);

/// torch::nn::Linear split by input features across the tensor-parallel group: after prepare()
/// each rank holds in_features / N columns of the weight, takes that slice of the input (a
/// ColumnParallelLinear's output), and the partial outputs are summed over the group before the
/// bias, which every rank holds whole, is added once. Before prepare(), on one process and at
/// TensorParallel<1>, it is a Linear.
class RowParallelLinearImpl : public torch::nn::Cloneable<RowParallelLinearImpl> {
 public:
  /// The same constructors as torch::nn::Linear.
  RowParallelLinearImpl(std::int64_t in_features, std::int64_t out_features)
      : RowParallelLinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}
  explicit RowParallelLinearImpl(const torch::nn::LinearOptions& options);

  /// Registers the full weight and bias, initialised as a Linear of these options.
  ACCEL_DECL void reset() override;
  ACCEL_DECL void pretty_print(std::ostream& stream) const override;
  ACCEL_DECL torch::Tensor forward(const torch::Tensor& input);

  /// Narrows the weight in place to this rank's columns; prepare() calls it. `path` names the
  /// layer in errors (an in_features the group's size does not divide); with `sequence` the
  /// partial outputs are reduce-scattered along the sequence, each rank keeping its part.
  ACCEL_DECL void split(runtime::ProcessGroup& group, const std::string& path,
                        bool sequence = false);
  /// The full weight gathered from the group, and back to this rank's columns.
  ACCEL_DECL void gather_full();
  ACCEL_DECL void release_full();
  /// Whether prepare() split it (false on one process and at TensorParallel<1>).
  bool is_split() const { return place_.split(); }
  /// Under Fp8 (prepare() attaches the scaling): the product in fp8, as accel::Fp8Linear's.
  void attach_fp8(c10::intrusive_ptr<precision::Fp8LinearScaling> scaling) {
    place_.fp8 = std::move(scaling);
  }
  bool computes_in_fp8() const { return static_cast<bool>(place_.fp8); }

  /// The full layer's options: in_features and out_features are the whole layer's.
  torch::nn::LinearOptions options;
  /// This rank's columns of the weight once split; the bias is always whole.
  torch::Tensor weight, bias;

 private:
  parallel::TensorParallelPlace place_;
};
TORCH_MODULE(RowParallelLinear);

inline ColumnParallelLinearImpl::ColumnParallelLinearImpl(const torch::nn::LinearOptions& options_,
                                                          FusedOutputs fused_)
    : options(options_), fused(fused_) {
  parallel::check_fused_outputs(options.out_features(), fused.count);
  reset();
}
inline RowParallelLinearImpl::RowParallelLinearImpl(const torch::nn::LinearOptions& options_)
    : options(options_) {
  reset();
}

namespace parallel {

// A parameter each rank of the group holds a different part of; `fused` projections side by
// side along the split dimension, each cut into the group's parts (FusedOutputs), 1 otherwise.
struct SplitParameter {
  torch::Tensor tensor;
  std::int64_t fused = 1;
};

// Splits every ColumnParallelLinear and RowParallelLinear of `module` (at any depth) across
// `group`, and returns the parameters it split.
ACCEL_DECL std::vector<SplitParameter> split_tensor_parallel_layers(torch::nn::Module& module,
                                                                    runtime::ProcessGroup& group,
                                                                    const std::string& label);
// Every split layer's full parameters, and back to the slices (Strategy::gather_full).
ACCEL_DECL void gather_tensor_parallel_layers(torch::nn::Module& module);
ACCEL_DECL void release_tensor_parallel_layers(torch::nn::Module& module);

}  // namespace parallel

}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/tensor_parallel_linear.ipp"
#endif
