// Any tracker (tracker_contract.hpp) behind one type, so that a run holds accel's writers and a
// program's own trackers in one list, in the order they are called:
//
//   auto mine = std::make_shared<MyTracker>();
//   accelerator.init_trackers("p", config, {.trackers = {accel::tracking::make_tracker(mine)}});
//
// Type-erased with a virtual call per tracker and call: this boundary is crossed a few times per
// logged step, never on the training path (which stays free of virtual dispatch), and it lets a
// list of trackers be chosen at run time, as Accelerate's log_with=[...] does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "tracker_contract.hpp"
#include "values.hpp"

namespace accel::tracking {

// How a run calls one tracker.
struct TrackerSettings {
  // Called on the main process only (RANK 0), as Accelerate's GeneralTracker.main_process_only;
  // false: on every process, each then writing what it likes (RunStart::main_process says which
  // it is, and its run_dir is empty off the main process).
  bool main_process_only = true;
};

class AnyTracker {
 public:
  template <TrackerContract T>
  explicit AnyTracker(std::shared_ptr<T> tracker, TrackerSettings settings = {})
      : self_(std::make_shared<Held<T>>(std::move(tracker))), settings_(settings) {}

  std::string name() const { return self_->name(); }
  bool main_process_only() const { return settings_.main_process_only; }
  bool can_take_back() const { return self_->can_take_back(); }

  void start(const RunStart& run) { self_->start(run); }
  void log(const Scalars& values, std::int64_t step, double seconds) {
    self_->log(values, step, seconds);
  }
  void log_text(const Texts& values, std::int64_t step, double seconds) {
    self_->log_text(values, step, seconds);
  }
  void finish() { self_->finish(); }
  void take_back_last() noexcept { self_->take_back_last(); }

 private:
  struct Model {
    virtual ~Model() = default;
    virtual std::string name() const = 0;
    virtual bool can_take_back() const = 0;
    virtual void start(const RunStart& run) = 0;
    virtual void log(const Scalars& values, std::int64_t step, double seconds) = 0;
    virtual void log_text(const Texts& values, std::int64_t step, double seconds) = 0;
    virtual void finish() = 0;
    virtual void take_back_last() noexcept = 0;
  };

  template <class T>
  struct Held final : Model {
    explicit Held(std::shared_ptr<T> held) : tracker(std::move(held)) {}
    std::string name() const override { return std::string(std::as_const(*tracker).name()); }
    bool can_take_back() const override { return TakesBackLastCall<T>; }
    void start(const RunStart& run) override { tracker->start(run); }
    void log(const Scalars& values, std::int64_t step, double seconds) override {
      tracker->log(values, step, seconds);
    }
    void log_text(const Texts& values, std::int64_t step, double seconds) override {
      tracker->log_text(values, step, seconds);
    }
    void finish() override { tracker->finish(); }
    void take_back_last() noexcept override {
      if constexpr (TakesBackLastCall<T>) tracker->take_back_last();
    }
    std::shared_ptr<T> tracker;
  };

  std::shared_ptr<Model> self_;
  TrackerSettings settings_;
};

// What make_tracker() goes on with once its static_assert has named a missing member, so that the
// message is the one error.
struct StandInTracker {
  std::string name() const { return "stand-in"; }
  void start(const RunStart& /*run*/) {}
  void log(const Scalars& /*values*/, std::int64_t /*step*/, double /*seconds*/) {}
  void log_text(const Texts& /*values*/, std::int64_t /*step*/, double /*seconds*/) {}
  void finish() {}
};

// A tracker of yours for TrackerOptions::trackers. Given as a std::shared_ptr, the run calls the
// object you keep (and may read afterwards); given by value, the run keeps a copy. A type that
// lacks a member stops here at compile time with an accel: message naming it.
template <class T>
AnyTracker make_tracker(std::shared_ptr<T> tracker, TrackerSettings settings = {}) {
  if constexpr (tracker_meets_contract<T>())
    return AnyTracker(std::move(tracker), settings);
  else
    return AnyTracker(std::make_shared<StandInTracker>(), settings);
}
template <class T>
AnyTracker make_tracker(T tracker, TrackerSettings settings = {}) {
  return make_tracker(std::make_shared<T>(std::move(tracker)), settings);
}

}  // namespace accel::tracking
