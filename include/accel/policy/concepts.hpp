// The vocabulary: what makes a type a policy of each kind.
#pragma once

#include <concepts>
#include <string_view>

#include "category.hpp"

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
concept CompressionPolicy = Tagged<P, compression_tag> && requires {
  { P::wire };
};

template <class P>
concept ShardingPolicy = Tagged<P, sharding_tag> && requires {
  { P::shards_optimizer_state } -> std::convertible_to<bool>;
  { P::shards_gradients } -> std::convertible_to<bool>;
  { P::shards_parameters } -> std::convertible_to<bool>;
};

template <class P>
concept ParallelismPolicy = Tagged<P, parallelism_tag> && requires {
  { P::name } -> std::convertible_to<std::string_view>;
};

template <class P>
concept PrecisionPolicy = Tagged<P, precision_tag> && requires {
  { P::compute };
  { P::autocast } -> std::convertible_to<bool>;
  { P::loss_scaling } -> std::convertible_to<bool>;
};

template <class P>
concept AccumulationPolicy = Tagged<P, accumulation_tag> && requires {
  { P::steps } -> std::convertible_to<int>;
  requires P::steps >= 1;
};

}  // namespace accel::policy

namespace accel {
using policy::AccumulationPolicy;
using policy::CompressionPolicy;
using policy::ParallelismPolicy;
using policy::PrecisionPolicy;
using policy::ShardingPolicy;
}  // namespace accel
