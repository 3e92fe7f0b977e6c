// How a module marked as a unit (accel::Sharded, parallel/sharded.hpp) reaches the strategy that
// shards it, without knowing that strategy's type: two typed callables over the strategy, set by
// prepare() under Zero3 / Fsdp<FullShard|HybridShard> and left empty under every other strategy
// (the module then runs as it is). Callables, not a virtual interface: the strategies stay free
// of virtual dispatch (tests/static/no_virtual_dispatch.cpp).
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <vector>

namespace accel::parallel::detail {

struct UnitRoute {
  // Before the call: the unit's full parameters gathered. Returns whether they were already
  // (inside full_parameters(), or a recomputing activation checkpoint): then nothing is freed.
  // Empty: not a unit of any strategy (the call runs as it is).
  std::function<bool()> enter;
  // After it: a hook on each output in the graph gathers the unit again for its backward, and
  // the full parameters are freed.
  std::function<void(bool was_gathered, const std::vector<torch::Tensor>& outputs)> leave;
};

// The base by which prepare() finds a marked module anywhere in a model's tree: a cross-cast
// from torch::nn::Module (dynamic_cast, once, at prepare), which the module's own polymorphism
// allows, so this base needs no virtual function. Never deleted through: its destructor is
// protected.
class MarkedUnit {
 public:
  UnitRoute unit_route;

 protected:
  MarkedUnit() = default;
  MarkedUnit(const MarkedUnit&) = default;
  MarkedUnit& operator=(const MarkedUnit&) = default;
  ~MarkedUnit() = default;
};

}  // namespace accel::parallel::detail
