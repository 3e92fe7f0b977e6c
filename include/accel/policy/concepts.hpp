// The vocabulary: what makes a type a policy of each kind. A policy names its kind's tag as
// `category` and has that kind's members (members.hpp); a type with the tag but not every member
// is not a policy, and where the policies meet (rules.hpp) it is an error naming the member.
#pragma once

#include <concepts>

#include "category.hpp"
#include "members.hpp"

namespace accel::policy {

template <class P, class Tag>
concept Tagged = requires {
  typename P::category;
  requires std::same_as<typename P::category, Tag>;
};

// True for any accel policy of any kind; used to tell "wrong slot" from "not a policy at all".
template <class P>
concept AnyPolicy = Tagged<P, parallelism_tag> || Tagged<P, sharding_tag> ||
                    Tagged<P, precision_tag> || Tagged<P, accumulation_tag> ||
                    Tagged<P, compression_tag>;

template <class P>
concept CompressionPolicy = Tagged<P, compression_tag> && member::name<P> && member::wire<P>;

template <class P>
concept ShardingPolicy = Tagged<P, sharding_tag> && member::name<P> &&
                         member::shards_optimizer_state<P> && member::shards_gradients<P> &&
                         member::shards_parameters<P>;

template <class P>
concept ParallelismPolicy =
    Tagged<P, parallelism_tag> && member::name<P> && member::sharded_state<P>;

template <class P>
concept PrecisionPolicy = Tagged<P, precision_tag> && member::name<P> && member::compute<P> &&
                          member::autocast<P> && member::loss_scaling<P>;

template <class P>
concept AccumulationPolicy = Tagged<P, accumulation_tag> && member::steps_at_least_one<P>;

}  // namespace accel::policy

namespace accel {
using policy::AccumulationPolicy;
using policy::CompressionPolicy;
using policy::ParallelismPolicy;
using policy::PrecisionPolicy;
using policy::ShardingPolicy;
}  // namespace accel
