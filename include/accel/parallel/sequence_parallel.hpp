// Sequence parallelism inside a tensor-parallel group (Megatron-LM's, Korthikanti et al.): between
// a row layer and the next column layer the residual stream and what acts on it token by token
// (LayerNorm, dropout) run on this rank's 1/N of the sequence instead of on all of it, the same
// on every rank. Activations there take 1/N of the memory, and the two collectives per pair of
// layers change, not their volume:
//
//   column layer   forward: all-gather the input along the sequence    backward: reduce-scatter
//   row layer      forward: reduce-scatter the output along it         backward: all-gather
//
// The sequence is dimension 1 of the activations ([batch, sequence, features], as the layers and
// torch's SequenceParallel take it). What a model marks, by type as the split layers are:
//
//   accel::SequenceParallel<torch::nn::LayerNorm>   a LayerNorm on this rank's tokens: its
//                   parameters are whole on every rank, their gradients summed over the group
//                   in backward (each rank saw 1/N of the tokens), so that they stay equal
//   accel::ScatterSequence   where the stream enters the region (after the embeddings): this
//                   rank's part of the sequence; backward all-gathers the gradient
//   accel::GatherSequence    where it leaves (before a replicated head): the whole sequence;
//                   backward keeps this rank's part of the gradient, which is the same on every
//                   rank there
//
// A model with any of them has every split layer run so (prepare() reads the marks). Until
// prepare(), on one process and at TensorParallel<1>, each is what it wraps, or the identity.
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <string_view>
#include <utility>

#include "../detail/separate_compilation.hpp"
#include "../runtime/process_group.hpp"

namespace accel {

namespace parallel {

// Along dimension 1 of `input`, over `group`; `who` names the caller in errors (a sequence the
// group's size does not divide, an input without a sequence dimension).
//   all_gather_sequence      forward all-gather, backward reduce-scatter (a column layer's input)
//   reduce_scatter_sequence  forward reduce-scatter, backward all-gather (a row layer's output)
//   scatter_to_sequence      forward this rank's part, backward all-gather (ScatterSequence)
//   gather_from_sequence     forward all-gather, backward this rank's part (GatherSequence)
ACCEL_DECL torch::Tensor all_gather_sequence(const torch::Tensor& input,
                                             runtime::ProcessGroup& group, std::string_view who);
ACCEL_DECL torch::Tensor reduce_scatter_sequence(const torch::Tensor& input,
                                                 runtime::ProcessGroup& group,
                                                 std::string_view who);
ACCEL_DECL torch::Tensor scatter_to_sequence(const torch::Tensor& input,
                                             runtime::ProcessGroup& group, std::string_view who);
ACCEL_DECL torch::Tensor gather_from_sequence(const torch::Tensor& input,
                                              runtime::ProcessGroup& group, std::string_view who);

// A replicated parameter as a sequence-parallel module uses it: Megatron's f (the column layers'
// copy_to_tensor_parallel), identity forward and the gradient summed over `group` in backward.
ACCEL_DECL torch::Tensor summed_in_backward(const torch::Tensor& parameter,
                                            runtime::ProcessGroup& group);

// A module SequenceParallel<M> can mark: `weight` and `bias` members, which it applies token by
// token (torch::nn::LayerNorm's Impl).
template <class Impl>
concept TokenwiseParameters = requires(Impl& module) {
  { module.weight } -> std::convertible_to<torch::Tensor>;
  { module.bias } -> std::convertible_to<torch::Tensor>;
};

// What each sequence-parallel mark knows: the tensor-parallel group, once prepare() placed it.
struct SequenceParallelMark {
  runtime::ProcessGroup* sequence_group = nullptr;
};

// Gives every sequence-parallel mark of `module` (at any depth) the group; whether there was one.
ACCEL_DECL bool place_sequence_parallel_marks(torch::nn::Module& module,
                                              runtime::ProcessGroup& group);

}  // namespace parallel

/// A module that acts token by token with replicated `weight` and `bias` (torch::nn::LayerNorm's
/// Impl and the like), run on this rank's part of the sequence: the same module, parameters and
/// names, whose parameters' gradients are summed over the tensor-parallel group in backward.
/// Use it through SequenceParallel<Holder>.
template <class Impl>
class SequenceParallelImpl : public Impl, public parallel::SequenceParallelMark {
  static_assert(parallel::TokenwiseParameters<Impl>,
                "accel: SequenceParallel<M> marks a module with `weight` and `bias` members that "
                "it applies token by token (torch::nn::LayerNorm); wrap such a module, or leave "
                "it unmarked");

 public:
  using Impl::Impl;

  torch::Tensor forward(const torch::Tensor& input) {
    if (sequence_group == nullptr) return Impl::forward(input);
    // The parameters through Megatron's f for this call: identity forward, the gradient summed
    // over the group in backward. The members are the module's own again after it.
    struct Restore {
      Impl& module;
      torch::Tensor weight, bias;
      ~Restore() {
        module.weight = std::move(weight);
        module.bias = std::move(bias);
      }
    } restore{*this, this->weight, this->bias};
    if (restore.weight.defined())
      this->weight = parallel::summed_in_backward(restore.weight, *sequence_group);
    if (restore.bias.defined())
      this->bias = parallel::summed_in_backward(restore.bias, *sequence_group);
    return Impl::forward(input);
  }
};

/// The sequence-parallel mark of a module holder: SequenceParallel<torch::nn::LayerNorm> takes
/// LayerNorm's constructors and is a LayerNorm (the same parameters and names) on one process.
template <class Holder>
using SequenceParallel =
    torch::nn::ModuleHolder<SequenceParallelImpl<typename Holder::ContainedType>>;

/// Where the residual stream enters the sequence-parallel region: this rank's 1/N of dimension 1
/// (the identity until prepare() splits the model).
class ScatterSequenceImpl : public torch::nn::Cloneable<ScatterSequenceImpl>,
                            public parallel::SequenceParallelMark {
 public:
  void reset() override {}
  ACCEL_DECL torch::Tensor forward(const torch::Tensor& input);
};
TORCH_MODULE(ScatterSequence);

/// Where it leaves: the whole of dimension 1 on every rank (the identity until prepare()).
class GatherSequenceImpl : public torch::nn::Cloneable<GatherSequenceImpl>,
                           public parallel::SequenceParallelMark {
 public:
  void reset() override {}
  ACCEL_DECL torch::Tensor forward(const torch::Tensor& input);
};
TORCH_MODULE(GatherSequence);

}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/sequence_parallel.ipp"
#endif
