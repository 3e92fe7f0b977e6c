// Parallelism policies: how parameters, gradients and optimizer state are spread over ranks.
// Plain tag structs of constants; the behaviour lives in parallel::Strategy<Policy>.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "category.hpp"
#include "compute_type.hpp"

namespace accel {

namespace policy {

// "Outer<Inner>" as one constant string: the one full name a policy with an argument goes by
// (in checkpoints, run.json, variant names and errors), so that Fsdp<FullShard> and
// Fsdp<ShardGradOp> are never both "Fsdp".
template <const std::string_view& Outer, const std::string_view& Inner>
struct NestedName {
  static constexpr auto text = [] {
    std::array<char, Outer.size() + Inner.size() + 2> joined{};
    std::size_t at = 0;
    for (const char c : Outer) joined[at++] = c;
    joined[at++] = '<';
    for (const char c : Inner) joined[at++] = c;
    joined[at] = '>';
    return joined;
  }();
  static constexpr std::string_view value{text.data(), text.size()};
};

// A policy argument's name. Every compression and sharding declares one: the composition rules
// (complete.hpp) refuse a tagged type without it, naming the type, so that two compressions of
// a user's can never share a name. The placeholder is for what the rules refuse anyway (an
// argument that is no policy at all, `Fsdp<int>`): it keeps their message the only error, and
// no program that compiles goes by it.
template <class T>
inline constexpr std::string_view name_of = "?";
template <class T>
  requires requires { std::string_view(T::name); }
inline constexpr std::string_view name_of<T> = T::name;

inline constexpr std::string_view ddp_with_name = "DdpWith";
inline constexpr std::string_view fsdp_name = "Fsdp";

}  // namespace policy

// What is sharded at rest, in the ZeRO paper's terms (stage 1: optimizer state, 2: + gradients,
// 3: + parameters). Every parallelism and sharding policy carries these three constants.
/// FSDP's FULL_SHARD: parameters, gradients and optimizer state sharded.
struct FullShard {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::sharding_tag;
  static constexpr std::string_view name = "FullShard";
  static constexpr bool shards_optimizer_state = true;
  static constexpr bool shards_gradients = true;
  static constexpr bool shards_parameters = true;
  /// Shard inside a node, replicate across nodes.
  static constexpr bool hybrid = false;
  /// @}
};

/// FSDP's SHARD_GRAD_OP: gradients and optimizer state sharded, parameters replicated.
struct ShardGradOp {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::sharding_tag;
  static constexpr std::string_view name = "ShardGradOp";
  static constexpr bool shards_optimizer_state = true;
  static constexpr bool shards_gradients = true;
  static constexpr bool shards_parameters = false;
  static constexpr bool hybrid = false;
  /// @}
};

/// FSDP's NO_SHARD: nothing sharded, gradients all-reduced.
struct NoShard {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::sharding_tag;
  static constexpr std::string_view name = "NoShard";
  static constexpr bool shards_optimizer_state = false;
  static constexpr bool shards_gradients = false;
  static constexpr bool shards_parameters = false;
  static constexpr bool hybrid = false;
  /// @}
};

/// FSDP's HYBRID_SHARD: everything sharded inside a node, replicated across nodes.
struct HybridShard {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::sharding_tag;
  static constexpr std::string_view name = "HybridShard";
  static constexpr bool shards_optimizer_state = true;
  static constexpr bool shards_gradients = true;
  static constexpr bool shards_parameters = true;
  static constexpr bool hybrid = true;
  /// @}
};

/// Replicated parameters, gradients all-reduced in buckets during backward.
struct Ddp {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::parallelism_tag;
  static constexpr std::string_view name = "Ddp";
  static constexpr bool shards_optimizer_state = false;
  static constexpr bool shards_gradients = false;
  static constexpr bool shards_parameters = false;
  static constexpr bool hybrid = false;
  /// @}
};

/// Gradient compression for Ddp: gradients are cast for the wire, averaged, and cast back.
struct CompressFp16 {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::compression_tag;
  static constexpr std::string_view name = "CompressFp16";
  static constexpr policy::ComputeType wire = policy::ComputeType::float16;
  /// @}
};
/// The same, cast to bf16 for the wire.
struct CompressBf16 {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::compression_tag;
  static constexpr std::string_view name = "CompressBf16";
  static constexpr policy::ComputeType wire = policy::ComputeType::bfloat16;
  /// @}
};

/// Ddp whose gradients travel compressed: DdpWith<CompressFp16> or DdpWith<CompressBf16>. (Ddp
/// itself stays a plain type, so that Accelerator<Ddp> needs no angle brackets.) The argument is
/// checked where the policies meet (policy/rules.hpp).
template <class Compression>
struct DdpWith {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::parallelism_tag;
  using compression = Compression;
  static constexpr std::string_view name =
      policy::NestedName<policy::ddp_with_name, policy::name_of<Compression>>::value;
  static constexpr bool shards_optimizer_state = false;
  static constexpr bool shards_gradients = false;
  static constexpr bool shards_parameters = false;
  static constexpr bool hybrid = false;
  /// @}
};

/// ZeRO stage 2: gradients reduce-scattered, optimizer state sharded, parameters replicated.
struct Zero2 {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::parallelism_tag;
  static constexpr std::string_view name = "Zero2";
  static constexpr bool shards_optimizer_state = true;
  static constexpr bool shards_gradients = true;
  static constexpr bool shards_parameters = false;
  static constexpr bool hybrid = false;
  /// @}
};

/// ZeRO stage 3: parameters sharded at rest too, gathered unit by unit around forward/backward.
struct Zero3 {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::parallelism_tag;
  static constexpr std::string_view name = "Zero3";
  static constexpr bool shards_optimizer_state = true;
  static constexpr bool shards_gradients = true;
  static constexpr bool shards_parameters = true;
  static constexpr bool hybrid = false;
  /// @}
};

// PyTorch FSDP's semantics, with its sharding strategy as a parameter. The sharding argument is
// checked where the policies meet (policy/rules.hpp), so that a wrong one reads as an accel: error.
namespace policy {
// Fsdp's constants, taken from its sharding; all false for an argument that is no sharding, which
// rules.hpp rejects with a message naming it (here it must not be an error of its own).
template <class S>
struct ShardedState {
  static constexpr bool optimizer_state = false, gradients = false, parameters = false;
};
template <class S>
  requires requires { S::shards_optimizer_state; S::shards_gradients; S::shards_parameters; }
struct ShardedState<S> {
  static constexpr bool optimizer_state = S::shards_optimizer_state;
  static constexpr bool gradients = S::shards_gradients;
  static constexpr bool parameters = S::shards_parameters;
};
}  // namespace policy

/// PyTorch FSDP's semantics, with its sharding strategy (FullShard, ShardGradOp, NoShard,
/// HybridShard) as a parameter.
template <class Sharding = FullShard>
struct Fsdp {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = policy::parallelism_tag;
  using sharding = Sharding;
  static constexpr std::string_view name = policy::NestedName<policy::fsdp_name, policy::name_of<Sharding>>::value;
  static constexpr bool shards_optimizer_state = policy::ShardedState<Sharding>::optimizer_state;
  static constexpr bool shards_gradients = policy::ShardedState<Sharding>::gradients;
  static constexpr bool shards_parameters = policy::ShardedState<Sharding>::parameters;
  /// @}
};

/// Whether a parallelism policy keeps parameters sharded at rest.
template <class P>
inline constexpr bool shards_parameters_v = P::shards_parameters;
/// Whether a window's gradients live in accel's shards rather than in the parameters' .grad.
template <class P>
inline constexpr bool shards_gradients_v = P::shards_gradients;

}  // namespace accel
