// accel::Sharded<Holder>: a module holder that makes its module a unit of Zero3 and
// Fsdp<FullShard|HybridShard> wherever it sits in the model (FSDP2's fully_shard(block)), for the
// blocks of a torch::nn::ModuleList and any forward with several arguments or outputs:
//
//   blocks = register_module("blocks", torch::nn::ModuleList());
//   for (int i = 0; i < layers; ++i) blocks->push_back(accel::Sharded<Block>(options));
//   ...
//   for (const auto& block : *blocks) x = block->as<accel::ShardedImpl<BlockImpl>>()->forward(x, mask);
//
// Under those strategies the unit's parameters are all-gathered when its forward starts, freed
// when it returns, gathered again when backward reaches any of its outputs and freed once its
// gradients are reduce-scattered (docs/concepts/strategies.md, "Units"). Under every other strategy, and
// before prepare(), the forward runs as it is.
//
// ShardedImpl<Impl> derives from the module's own Impl, so it IS that module: the same
// constructors, parameters and names (checkpoints and weights load with or without it), the same
// ->member access. Only forward, with the Impl's exact signature (so Sequential and AnyModule
// accept it), goes through the unit. Its outputs may be a tensor, a tuple, a vector or an
// aggregate of tensors (data/tensor_tree.hpp walks them); its arguments anything.
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "../data/tensor_tree.hpp"
#include "../detail/dependent_false.hpp"
#include "unit_route.hpp"

namespace accel::parallel {

namespace detail {
// Runs `run` (the module's own forward) inside the unit `route` names, if any.
template <class Run>
auto call_through_unit(const UnitRoute& route, Run&& run) {
  if (!route.enter) return run();
  const bool was_gathered = route.enter();
  auto output = run();
  std::vector<torch::Tensor> outputs;
  data::for_each_tensor(output, [&outputs](const torch::Tensor& t) { outputs.push_back(t); });
  route.leave(was_gathered, outputs);
  return output;
}
}  // namespace detail

/// A module whose forward is not one plain member function: a compile error that says so.
template <class Impl, class Signature = decltype(&Impl::forward)>
class ShardedImpl : public Impl, public detail::MarkedUnit {
  static_assert(accel::detail::dependent_false<Impl>,
                "accel: Sharded<Holder>: the module's forward is not one plain member function "
                "(it is overloaded, a template or static), so accel cannot give the wrapper the "
                "same signature; wrap a module whose forward is one plain member function");
};

/// Impl itself, whose forward (a plain member function) runs through its unit.
template <class Impl, class R, class C, class... A>
class ShardedImpl<Impl, R (C::*)(A...)> : public Impl, public detail::MarkedUnit {
 public:
  using Impl::Impl;
  /// Impl's forward, inside the unit.
  R forward(A... args) {
    return detail::call_through_unit(
        unit_route, [&]() -> R { return Impl::forward(std::forward<A>(args)...); });
  }
};

/// The same for a const forward.
template <class Impl, class R, class C, class... A>
class ShardedImpl<Impl, R (C::*)(A...) const> : public Impl, public detail::MarkedUnit {
 public:
  using Impl::Impl;
  /// Impl's forward, inside the unit.
  R forward(A... args) const {
    return detail::call_through_unit(
        unit_route, [&]() -> R { return Impl::forward(std::forward<A>(args)...); });
  }
};

/// Sharded<Block> (a TORCH_MODULE holder of yours), Sharded<torch::nn::Linear>,
/// Sharded<Checkpointed<Block>> (activation checkpointing inside the unit).
template <class Holder>
using Sharded = torch::nn::ModuleHolder<ShardedImpl<typename Holder::ContainedType>>;

}  // namespace accel::parallel

namespace accel {
using parallel::Sharded;
using parallel::ShardedImpl;
}  // namespace accel
