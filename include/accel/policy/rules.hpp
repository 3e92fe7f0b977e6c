// Composition rules: checked once, where the policies meet (Accelerator<Par, Prec, Acc>).
// Each rule is a named static_assert whose message starts with `accel:`, says what is wrong and
// shows the fix as code; docs/concepts/policies.md quotes every message. A rule returns false only after
// one of its assertions has fired, and Checked asserts that every rule passed, so a composition
// that breaks a rule never compiles. While the compiler goes on reporting, `Checked` hands the
// Accelerator a valid stand-in for the offending slot, so that only our messages are printed,
// not a cascade of errors from code that assumed the rule held.
#pragma once

#include <type_traits>

#include "accumulation.hpp"
#include "complete.hpp"
#include "concepts.hpp"
#include "parallelism.hpp"
#include "precision.hpp"
#include "tensor_parallel.hpp"

namespace accel::policy {

// False for every type, once instantiated: an assertion on it in a branch fires only where that
// branch is taken. (The policies are the bottom layer: detail/dependent_false.hpp is above them.)
template <class>
inline constexpr bool never = false;

// The sharding flags of a parallelism policy: Fsdp<S> takes them from S.
template <class Par>
struct sharding_of {
  using type = Par;
};
template <class S>
struct sharding_of<Fsdp<S>> {
  using type = S;
};
template <class Par>
using sharding_of_t = typename sharding_of<Par>::type;

template <class T>
inline constexpr bool is_fsdp = false;
template <class S>
inline constexpr bool is_fsdp<Fsdp<S>> = true;

// --- Rule: the first parameter is a parallelism policy -------------------------------------------
template <class Par>
consteval bool parallelism_slot_ok() {
  static_assert(!Tagged<Par, precision_tag>,
                "accel: Accelerator's first parameter is the parallelism policy, but a precision "
                "policy was given there; put parallelism first: Accelerator<Ddp, Bf16>");
  static_assert(!Tagged<Par, accumulation_tag>,
                "accel: Accelerator's first parameter is the parallelism policy, but GradAccum was "
                "given there; write Accelerator<Ddp, Fp32, GradAccum<4>>");
  static_assert(!Tagged<Par, sharding_tag>,
                "accel: a sharding strategy (FullShard, ShardGradOp, NoShard, HybridShard) is an "
                "argument of Fsdp, not a parallelism policy; write Accelerator<Fsdp<FullShard>>");
  static_assert(!Tagged<Par, compression_tag>,
                "accel: a gradient compression (CompressFp16, CompressBf16) is an argument of "
                "DdpWith, not a parallelism policy; write Accelerator<DdpWith<CompressFp16>>");
  static_assert(!Tagged<Par, tensor_parallel_tag>,
                "accel: TensorParallel<N> is the second dimension of Parallel, not a parallelism "
                "policy of its own; write Accelerator<Parallel<Ddp, TensorParallel<2>>>");
  static_assert(AnyPolicy<Par> || Tagged<Par, tensor_parallel_tag>,
                "accel: Accelerator's first parameter is not an accel policy; use one of Ddp, "
                "Zero2, Zero3, Fsdp<FullShard|ShardGradOp|NoShard|HybridShard>");
  // Tagged for this slot: every member must be there (complete.hpp names a missing one).
  if constexpr (Tagged<Par, parallelism_tag>)
    return parallelism_members_ok<Par>();
  else
    return false;  // one of the assertions above has fired
}

// --- Rule: Fsdp's argument is a sharding strategy ------------------------------------------------
template <class Par>
consteval bool fsdp_sharding_ok() {
  if constexpr (!is_fsdp<Par>) {
    return true;
  } else if constexpr (Tagged<sharding_of_t<Par>, sharding_tag>) {
    return sharding_members_ok<sharding_of_t<Par>>();
  } else {
    static_assert(never<Par>,
                  "accel: Fsdp<S> takes a sharding strategy as S; use Fsdp<FullShard>, "
                  "Fsdp<ShardGradOp>, Fsdp<NoShard> or Fsdp<HybridShard>");
    return false;
  }
}

// --- Rule: DdpWith's argument is a gradient compression ------------------------------------------
template <class T>
inline constexpr bool is_ddp_with = false;
template <class C>
inline constexpr bool is_ddp_with<DdpWith<C>> = true;

template <class Par>
consteval bool ddp_compression_ok() {
  if constexpr (!is_ddp_with<Par>) {
    return true;
  } else if constexpr (Tagged<typename Par::compression, compression_tag>) {
    return compression_members_ok<typename Par::compression>();
  } else {
    static_assert(never<Par>,
                  "accel: DdpWith<C> takes a gradient compression as C; use "
                  "DdpWith<CompressFp16> or DdpWith<CompressBf16>, or Ddp for none");
    return false;
  }
}

// --- Rule: Parallel<P, D> is Parallel<P, TensorParallel<N>>, P one tensor parallelism runs under
// Tensor parallelism splits the marked layers across a group of ranks and runs the outer policy
// across the groups, over the data-parallel group alone. Ddp, Zero2, Zero3 and the Fsdp names of
// their strategies work so; Fsdp<HybridShard> cuts its own groups by node, which would cross the
// tensor-parallel groups, and DdpWith's compressed all-reduce is untried there: both are refused
// by name until they are taught it.
template <class P>
inline constexpr bool tensor_parallel_outer = false;
template <>
inline constexpr bool tensor_parallel_outer<Ddp> = true;
template <>
inline constexpr bool tensor_parallel_outer<Zero2> = true;
template <>
inline constexpr bool tensor_parallel_outer<Zero3> = true;
template <>
inline constexpr bool tensor_parallel_outer<Fsdp<NoShard>> = true;
template <>
inline constexpr bool tensor_parallel_outer<Fsdp<ShardGradOp>> = true;
template <>
inline constexpr bool tensor_parallel_outer<Fsdp<FullShard>> = true;

template <class T>
inline constexpr bool is_composed = false;
template <class Outer, class Dimension>
inline constexpr bool is_composed<Composed<Outer, Dimension>> = true;

template <class Par>
consteval bool tensor_parallel_ok() {
  if constexpr (!is_composed<Par>) {
    return true;
  } else if constexpr (!is_tensor_parallel<typename Par::dimension>) {
    static_assert(never<Par>,
                  "accel: Parallel<P, D> takes TensorParallel<N> as D, the ranks each marked "
                  "layer is split across; write Parallel<Ddp, TensorParallel<2>>");
    return false;
  } else if constexpr (Par::dimension::degree < 1) {
    return false;  // TensorParallel<N>'s own assertion has said so
  } else if constexpr (!tensor_parallel_outer<typename Par::outer>) {
    static_assert(never<Par>,
                  "accel: tensor parallelism works with Ddp, Zero2, Zero3 and Fsdp<NoShard|"
                  "ShardGradOp|FullShard> across the tensor-parallel groups; Fsdp<HybridShard> "
                  "and DdpWith<...> with TensorParallel are not supported yet: write "
                  "Parallel<Zero3, TensorParallel<N>> for sharding, or Parallel<Ddp, "
                  "TensorParallel<N>>");
    return false;
  } else {
    return true;
  }
}

// --- Rule: the second parameter is a precision policy --------------------------------------------
template <class Prec>
consteval bool precision_slot_ok() {
  static_assert(!Tagged<Prec, parallelism_tag>,
                "accel: Accelerator's second parameter is the precision policy, but a parallelism "
                "policy was given there; write Accelerator<Ddp, Bf16>");
  static_assert(!Tagged<Prec, accumulation_tag>,
                "accel: Accelerator's second parameter is the precision policy, but GradAccum was "
                "given there; write Accelerator<Ddp, Fp32, GradAccum<4>>");
  static_assert(!Tagged<Prec, sharding_tag> && !Tagged<Prec, compression_tag>,
                "accel: Accelerator's second parameter is the precision policy, but a sharding "
                "strategy or gradient compression was given there; those are arguments of Fsdp "
                "and DdpWith: write Accelerator<Fsdp<FullShard>, Bf16>");
  static_assert(AnyPolicy<Prec>,
                "accel: Accelerator's second parameter is not an accel policy; use one of Fp32, "
                "Fp16, Bf16, Fp8");
  if constexpr (Tagged<Prec, precision_tag>)
    return precision_members_ok<Prec>();
  else
    return false;  // one of the assertions above has fired
}

// --- Rule: the third parameter is an accumulation policy -----------------------------------------
template <class Acc>
consteval bool accumulation_slot_ok() {
  // Any other kind of policy: parallelism or precision most likely, sharding or compression too.
  static_assert(!AnyPolicy<Acc> || Tagged<Acc, accumulation_tag>,
                "accel: Accelerator's third parameter is the accumulation policy; write "
                "Accelerator<Ddp, Bf16, GradAccum<4>>");
  static_assert(AnyPolicy<Acc>,
                "accel: Accelerator's third parameter is not an accel policy; use GradAccum<N> "
                "with N >= 1");
  if constexpr (Tagged<Acc, accumulation_tag>)
    return accumulation_members_ok<Acc>();
  else
    return false;  // one of the assertions above has fired
}

// All rules for one composition. `parallelism`, `precision` and `accumulation` are the policies
// the Accelerator builds on: the given ones when valid; stand-ins only in a build that has
// already failed (the assertion below), to keep its error list to our messages.
template <class Par, class Prec, class Acc>
struct Checked {
  static constexpr bool parallelism_ok =
      parallelism_slot_ok<Par>() && fsdp_sharding_ok<Par>() && ddp_compression_ok<Par>() &&
      tensor_parallel_ok<Par>();
  static constexpr bool precision_ok = precision_slot_ok<Prec>();
  static constexpr bool accumulation_ok = accumulation_slot_ok<Acc>();
  static constexpr bool value = parallelism_ok && precision_ok && accumulation_ok;
  static_assert(value,
                "accel: these policies do not compose into an Accelerator; the accel: messages "
                "above name each broken rule and its fix");

  using parallelism = std::conditional_t<parallelism_ok, Par, Ddp>;
  using precision = std::conditional_t<precision_ok, Prec, Fp32>;
  using accumulation = std::conditional_t<accumulation_ok, Acc, GradAccum<1>>;
};

}  // namespace accel::policy
