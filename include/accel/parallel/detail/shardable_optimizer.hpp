// Which torch::optim optimizers a sharded strategy may rebuild over a shard of the parameters.
//
// Zero2 keeps optimizer state for this rank's shard only by constructing the user's optimizer
// type, with the same options, over the shard. That is exact when the update of every element
// depends on that element alone (its gradient, its own state, the group's options): the rows of
// the optimizer table, SGD (with momentum, dampening, Nesterov, weight decay), Adam, AdamW
// (amsgrad too), Adagrad and RMSprop.
// LBFGS is not (its line search and curvature pairs use dot products over all parameters), and
// an optimizer known only as torch::optim::Optimizer, or a type of the user's, cannot be rebuilt
// from its options: both are refused at compile time.
#pragma once

#include <torch/torch.h>

#include <string_view>
#include <type_traits>

#include "../../detail/optimizer_types.hpp"

namespace accel::parallel::detail {

// Every row of the optimizer table (detail/optimizer_table.hpp) is element-wise: a type is
// shardable exactly when it is one of them.
template <class Optimizer>
struct ShardableOptimizer : std::false_type {};

template <class Optimizer>
  requires(accel::detail::kind_of_type<Optimizer> != OptimizerKind::other)
struct ShardableOptimizer<Optimizer> : std::true_type {
  using options =
      typename accel::detail::OptimizerTypes<accel::detail::kind_of_type<Optimizer>>::options;
  static constexpr std::string_view name =
      accel::detail::known_optimizer(accel::detail::kind_of_type<Optimizer>)->type_name;
};

// True once the optimizer has stepped (or had state loaded into it). Adagrad's constructor
// fills its state with the initial accumulators at step 0: that is not a step.
template <class Optimizer>
bool has_stepped(const Optimizer& optimizer) {
  if constexpr (std::is_same_v<Optimizer, torch::optim::Adagrad>) {
    for (const auto& [key, state] : optimizer.state())
      if (static_cast<const torch::optim::AdagradParamState&>(*state).step() > 0) return true;
    return false;
  } else {
    return !optimizer.state().empty();
  }
}

}  // namespace accel::parallel::detail
