// The Accelerator's deprecated members: parts of its implementation it used to hand out
// (docs/reference/accelerator.md, "Deprecated"). Each still works and warns where it is called,
// naming what replaces it; tests and tools read these parts through accel::testing::internals
// (core/internals.hpp). They are kept in this base of their own so that the class's surface reads
// without them and they can go together.
#pragma once

#include "internals.hpp"

namespace accel::detail {

/// strategy(), process_group(), environment(), precision(), precision_state(),
/// load_precision_state() and tracker(), deprecated.
template <class Derived>  // the Accelerator
class WithDeprecatedMembers {
 public:
  [[deprecated("accel: Accelerator::strategy() is internal; tests and tools read it through "
               "accel::testing::internals(accelerator).strategy()")]]
  const auto& strategy() const {
    return testing::internals(derived()).strategy();
  }
  [[deprecated("accel: Accelerator::process_group() is internal; pass the accelerator itself to "
               "accel::find_executable_batch_size(start, fn, accelerator)")]]
  runtime::ProcessGroup* process_group() const {
    return testing::internals(derived()).process_group();
  }
  [[deprecated("accel: Accelerator::environment() is internal; read the variables with "
               "std::getenv, or accel::testing::internals(accelerator).environment() in a test")]]
  const runtime::Environment& environment() const {
    return testing::internals(derived()).environment();
  }
  [[deprecated("accel: Accelerator::precision() is internal; use accelerator.skipped_steps() "
               "for Fp16's count, accel::testing::internals(accelerator).precision() in a test")]]
  const auto& precision() const {
    return testing::internals(derived()).precision();
  }
  [[deprecated("accel: Accelerator::precision_state() is internal; save_state() saves it")]]
  auto precision_state() const {
    return testing::internals(derived()).precision_state();
  }
  template <class State>
  [[deprecated("accel: Accelerator::load_precision_state() is internal; load_state() loads it")]]
  void load_precision_state(const State& state) {
    testing::internals(static_cast<Derived&>(*this)).load_precision_state(state);
  }
  [[deprecated("accel: Accelerator::tracker() is internal; use accelerator.run_dir() for the "
               "run folder")]]
  const tracking::Tracker& tracker() const {
    return testing::internals(derived()).tracker();
  }

 protected:
  WithDeprecatedMembers() = default;

 private:
  // The up-call is the simplest honest form here: this base is a slice of the Accelerator's
  // public surface and the state it works on lives in the Accelerator; it reads that state
  // (and calls its public members), and nothing it calls comes back into this base.
  const Derived& derived() const { return static_cast<const Derived&>(*this); }
};

}  // namespace accel::detail
