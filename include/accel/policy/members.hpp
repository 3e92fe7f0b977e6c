// The members each kind of policy must have, one concept per member, so that the concepts
// (concepts.hpp) and the messages for a tagged but incomplete policy (complete.hpp) test exactly
// the same thing and can never disagree.
#pragma once

#include <concepts>
#include <string_view>

#include "compute_type.hpp"

namespace accel::policy::member {

template <class P>
concept name = requires {
  { P::name } -> std::convertible_to<std::string_view>;
};

// Precision: the forward dtype, and whether autocast and loss scaling are on.
template <class P>
concept compute = requires {
  { P::compute } -> std::convertible_to<ComputeType>;
};
template <class P>
concept autocast = requires {
  { P::autocast } -> std::convertible_to<bool>;
};
template <class P>
concept loss_scaling = requires {
  { P::loss_scaling } -> std::convertible_to<bool>;
};

// Accumulation: micro-batches per optimizer step (at least 1: see steps_at_least_one).
template <class P>
concept steps = requires {
  { P::steps } -> std::convertible_to<int>;
};
template <class P>
concept steps_at_least_one = steps<P> && (P::steps >= 1);

// Sharding (Fsdp's argument): what is sharded at rest.
template <class P>
concept shards_optimizer_state = requires {
  { P::shards_optimizer_state } -> std::convertible_to<bool>;
};
template <class P>
concept shards_gradients = requires {
  { P::shards_gradients } -> std::convertible_to<bool>;
};
template <class P>
concept shards_parameters = requires {
  { P::shards_parameters } -> std::convertible_to<bool>;
};

// Parallelism: which state it shards at rest, as a sharding says it (estimate_memory, the
// Accelerator's heap tuning and its mid-window checks read them).
template <class P>
concept sharded_state = shards_optimizer_state<P> && shards_gradients<P> && shards_parameters<P>;

// Compression (DdpWith's argument): the dtype gradients travel in.
template <class P>
concept wire = requires {
  { P::wire } -> std::convertible_to<ComputeType>;
};

}  // namespace accel::policy::member
