// How a module marked as a unit (accel::Sharded, parallel/sharded.hpp) reaches the strategy that
// shards it, without knowing that strategy's type: through the UnitGate the strategy implements,
// which prepare() points the route at under Zero3 / Fsdp<FullShard|HybridShard>. Under every
// other strategy the route stays empty and the module runs as it is.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <vector>

namespace accel::parallel::detail {

class UnitGate {
 public:
  // Before the call: the unit's full parameters gathered. Returns whether they were already
  // (inside full_parameters(), or a recomputing activation checkpoint): then nothing is freed.
  virtual bool enter_unit(std::size_t unit) = 0;
  // After it: a hook on each output in the graph gathers the unit again for its backward, and
  // the full parameters are freed.
  virtual void leave_unit(std::size_t unit, bool was_gathered,
                          const std::vector<torch::Tensor>& outputs) = 0;

 protected:
  UnitGate() = default;
  UnitGate(const UnitGate&) = default;
  UnitGate& operator=(const UnitGate&) = default;
  ~UnitGate() = default;
};

struct UnitRoute {
  UnitGate* gate = nullptr;  // the strategy; null: not a unit of any (the call runs as it is)
  std::size_t unit = 0;
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
