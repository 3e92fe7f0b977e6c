// A type tagged as a policy of some kind but missing one of that kind's members (members.hpp) is
// an error naming the member, never a silent "not a policy" that lets another policy stand in
// for it. Each function asserts one kind's members, one message per member, and returns whether
// all are there; g++ names the type in the line before the message ("[with P = MyPolicy]").
// docs/concepts/policies.md#writing-a-policy quotes every message.
#pragma once

#include "accumulation.hpp"
#include "members.hpp"

namespace accel::policy {

template <class P>
consteval bool parallelism_members_ok() {
  static_assert(member::name<P>,
                "accel: a type tagged as a parallelism policy (category = "
                "accel::policy::parallelism_tag) has no `static constexpr std::string_view name`; "
                "add it: `static constexpr std::string_view name = \"MyPolicy\";` (see "
                "docs/concepts/policies.md#writing-a-policy)");
  static_assert(member::sharded_state<P>,
                "accel: a type tagged as a parallelism policy (category = "
                "accel::policy::parallelism_tag) has no `static constexpr bool "
                "shards_optimizer_state`, `shards_gradients` or `shards_parameters`; add all three "
                "(all false for a strategy that replicates everything, as Ddp; see "
                "docs/concepts/policies.md#writing-a-policy)");
  return member::name<P> && member::sharded_state<P>;
}

template <class P>
consteval bool precision_members_ok() {
  static_assert(member::name<P>,
                "accel: a type tagged as a precision policy (category = "
                "accel::policy::precision_tag) has no `static constexpr std::string_view name`; "
                "add it: `static constexpr std::string_view name = \"MyPrecision\";` (see "
                "docs/concepts/policies.md#writing-a-policy)");
  static_assert(member::compute<P>,
                "accel: a type tagged as a precision policy (category = "
                "accel::policy::precision_tag) has no `static constexpr ComputeType compute`; add "
                "it: `static constexpr auto compute = accel::policy::ComputeType::bfloat16;` (see "
                "docs/concepts/policies.md#writing-a-policy)");
  static_assert(member::autocast<P>,
                "accel: a type tagged as a precision policy (category = "
                "accel::policy::precision_tag) has no `static constexpr bool autocast`; add it: "
                "`static constexpr bool autocast = true;` to run forward in compute's dtype (see "
                "docs/concepts/policies.md#writing-a-policy)");
  static_assert(member::loss_scaling<P>,
                "accel: a type tagged as a precision policy (category = "
                "accel::policy::precision_tag) has no `static constexpr bool loss_scaling`; add "
                "it: `static constexpr bool loss_scaling = false;` (see "
                "docs/concepts/policies.md#writing-a-policy)");
  return member::name<P> && member::compute<P> && member::autocast<P> && member::loss_scaling<P>;
}

template <class T>
inline constexpr bool is_grad_accum = false;
template <int N>
inline constexpr bool is_grad_accum<GradAccum<N>> = true;

template <class P>
consteval bool accumulation_members_ok() {
  static_assert(member::steps<P>,
                "accel: a type tagged as an accumulation policy (category = "
                "accel::policy::accumulation_tag) has no `static constexpr int steps`; add it: "
                "`static constexpr int steps = 4;` micro-batches per optimizer step (see "
                "docs/concepts/policies.md#writing-a-policy)");
  // GradAccum<N> with N < 1 has already said so in its own body; say it once.
  static_assert(!member::steps<P> || member::steps_at_least_one<P> || is_grad_accum<P>,
                "accel: an accumulation policy's steps must be at least 1 (micro-batches per "
                "optimizer step); for no accumulation use GradAccum<1>");
  return member::steps_at_least_one<P>;
}

template <class P>
consteval bool sharding_members_ok() {
  static_assert(member::name<P>,
                "accel: a type tagged as a sharding strategy (category = "
                "accel::policy::sharding_tag) has no `static constexpr std::string_view name`; "
                "add it: `static constexpr std::string_view name = \"MySharding\";` (Fsdp<S> is "
                "named after it in checkpoints, run.json and variant names; see "
                "docs/concepts/policies.md#writing-a-policy)");
  static_assert(member::shards_optimizer_state<P>,
                "accel: a type tagged as a sharding strategy (category = "
                "accel::policy::sharding_tag) has no `static constexpr bool "
                "shards_optimizer_state`; add it (see docs/concepts/policies.md#writing-a-policy)");
  static_assert(member::shards_gradients<P>,
                "accel: a type tagged as a sharding strategy (category = "
                "accel::policy::sharding_tag) has no `static constexpr bool shards_gradients`; add "
                "it (see docs/concepts/policies.md#writing-a-policy)");
  static_assert(member::shards_parameters<P>,
                "accel: a type tagged as a sharding strategy (category = "
                "accel::policy::sharding_tag) has no `static constexpr bool shards_parameters`; "
                "add it (see docs/concepts/policies.md#writing-a-policy)");
  return member::name<P> && member::shards_optimizer_state<P> && member::shards_gradients<P> &&
         member::shards_parameters<P>;
}

template <class P>
consteval bool compression_members_ok() {
  static_assert(member::name<P>,
                "accel: a type tagged as a gradient compression (category = "
                "accel::policy::compression_tag) has no `static constexpr std::string_view name`; "
                "add it: `static constexpr std::string_view name = \"MyCompression\";` (DdpWith<C> "
                "is named after it in checkpoints, run.json and variant names; see "
                "docs/concepts/policies.md#writing-a-policy)");
  static_assert(member::wire<P>,
                "accel: a type tagged as a gradient compression (category = "
                "accel::policy::compression_tag) has no `static constexpr ComputeType wire`; add "
                "it: `static constexpr auto wire = accel::policy::ComputeType::float16;` (see "
                "docs/concepts/policies.md#writing-a-policy)");
  return member::name<P> && member::wire<P>;
}

}  // namespace accel::policy
