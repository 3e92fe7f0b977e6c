// accel::testing::internals(accelerator): what an Accelerator keeps that a training loop has no
// use for (its strategy, its precision's behaviour and state, its process group, the environment
// it read, the run's trackers, the core the loaders talk to), for accel's tests, benchmarks and
// tools (accel-launch test), which check what the policies hold. It is no part of the Accelerator's public surface
// (docs/reference/accelerator.md): what it returns changes with the policies' implementation.
//
//   const auto& flats = accel::testing::internals(acc).strategy().flat_parameters();
#pragma once

#include <utility>

#include "../runtime/environment.hpp"
#include "accelerator_core.hpp"
#include "../runtime/process_group.hpp"
#include "../tracking/tracker.hpp"

namespace accel::testing {

/// Read access to an Accelerator's parts (and the precision state's setter); the Accelerator makes
/// it a friend. Holds a reference: use it while the Accelerator lives.
template <class Accel>  // an accel::Accelerator, const or not
class Internals {
 public:
  explicit Internals(Accel& accelerator) : accelerator_(accelerator) {}

  /// The parallelism strategy: what it keeps (Zero2's flat parameters and the optimizers over
  /// this rank's shard, Zero3's units).
  const auto& strategy() const { return accelerator_.strategy_; }
  /// The process group; null on one process.
  runtime::ProcessGroup* process_group() const { return accelerator_.group_.get(); }
  /// The environment variables read at construction.
  const runtime::Environment& environment() const { return accelerator_.environment_; }
  /// The precision policy's behaviour: its options and report (Fp16: skipped_steps(); Fp8:
  /// fp8_layers(), scaling(i)).
  const auto& precision() const { return accelerator_.precision_; }
  /// What a checkpoint saves of the precision policy (Fp16: precision::LossScaleState, the scale
  /// and growth tracker; Fp8: precision::Fp8State; an empty struct for Fp32 and Bf16).
  auto precision_state() const { return accelerator_.precision_.state(); }
  /// Puts back a state precision_state() returned; what load_state() would refuse is refused.
  void load_precision_state(const decltype(std::declval<const Accel&>().precision_.state())& state)
      const {
    accelerator_.precision_.load_state(state);
  }
  /// The run's trackers (tracking/tracker.hpp): is_open(), run_dir().
  const tracking::Tracker& tracker() const { return accelerator_.run_tracker(); }
  /// The policy-independent core the prepared loaders talk to (core/accelerator_core.hpp), for
  /// a test that makes a PreparedLoader over a shard of its own.
  detail::AcceleratorCore* core() const { return &accelerator_; }

 private:
  Accel& accelerator_;
};

/// The parts of `accelerator` (see Internals).
template <class Accel>
Internals<Accel> internals(Accel& accelerator) {
  return Internals<Accel>(accelerator);
}

}  // namespace accel::testing
