// Learning-rate schedules libtorch lacks, as torch::optim::LRScheduler subclasses:
// ConstantWithWarmup, LinearWithWarmup, CosineWithWarmup, InverseSqrt. The formulas are plain
// functions in schedule/factors.hpp; docs/how-to/schedules.md describes both.
//
// Being LRSchedulers, they go through Accelerator::prepare like libtorch's own (the prepared
// handle steps them once per optimizer step that was applied) and through save_state /
// load_state, which keep only the step count and the optimizer's lrs. So every lr is a pure
// function of (step count, the group's lr when the schedule was built), never the previous lr
// times something: a restored step count gives the same lrs, bit for bit.
#pragma once

#include <fmt/format.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "detail/error.hpp"
#include "schedule/factors.hpp"

namespace accel::schedule {

namespace detail {

// What the four schedulers share. Built on an optimizer, it takes each param group's lr as that
// group's base lr and at once sets the lrs of optimizer step 0 (PyTorch's LambdaLR does the
// same in its constructor: with a warmup, step 0 runs at lr 0). Build it right after the
// optimizer, before load_state and before any other schedule changes the lrs, since those are
// the base lrs it keeps.
template <ScheduleOptions Options>
class FactorScheduler : public torch::optim::LRScheduler {
 public:
  const Options& options() const { return options_; }
  // Each param group's lr when the schedule was built.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The optimizer steps taken so far: the index of the step the optimizer's lrs are now for.
  std::int64_t step_count() const { return static_cast<std::int64_t>(step_count_); }
  // Each group's lr at optimizer step `step` (from 0), whatever the step count is now.
  std::vector<double> lrs_at(std::int64_t step) const {
    check_step(step, name_);
    std::vector<double> lrs;
    lrs.reserve(base_lrs_.size());
    for (const double base : base_lrs_) lrs.push_back(lr(step, base, options_));
    return lrs;
  }

 protected:
  FactorScheduler(torch::optim::Optimizer& optimizer, const Options& options,
                  std::string_view name)
      : torch::optim::LRScheduler(optimizer), optimizer_ptr_(&optimizer), options_(options),
        name_(name) {
    // libtorch 1.13 leaves step_count_ uninitialised (2.x zeroes it), and every lr depends on it.
    step_count_ = 0;
    check(options_, name_);
    auto& groups = optimizer.param_groups();
    base_lrs_.reserve(groups.size());
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const double base = groups[g].options().get_lr();
      check_base_lr(base, options_, name_, fmt::format("param group {}'s lr", g));
      base_lrs_.push_back(base);
    }
    // Only once every argument passed: a refused schedule leaves the optimizer as it was.
    const std::vector<double> first = lrs_at(0);
    for (std::size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(first[g]);
  }

  // libtorch's step() sets the lrs this returns and then counts the step. It is called after
  // optimizer step step_count_ (from 0), so the lrs set now are those of step step_count_ + 1,
  // and after n calls the optimizer holds the lrs of step n: the same count save_state keeps.
  std::vector<double> get_lrs() override {
    const std::size_t groups = optimizer_ptr_->param_groups().size();
    if (groups != base_lrs_.size())
      accel::detail::fail("{}: the optimizer has {} param groups, and had {} when the schedule "
                          "was built; build the schedule after the last add_param_group",
                          name_, groups, base_lrs_.size());
    return lrs_at(step_count() + 1);
  }

 private:
  // The base class keeps its optimizer private; this one is for the group count check.
  torch::optim::Optimizer* optimizer_ptr_;
  Options options_;
  std::string_view name_;  // a string literal
  std::vector<double> base_lrs_;
};

}  // namespace detail

/// The full lr after warmup_steps steps of linear warmup.
class ConstantWithWarmup : public detail::FactorScheduler<ConstantOptions> {
 public:
  /// Takes each param group's lr as its base lr and sets step 0's lrs at once.
  ConstantWithWarmup(torch::optim::Optimizer& optimizer, const ConstantOptions& options)
      : FactorScheduler(optimizer, options, "ConstantWithWarmup") {}
};

/// Linear warmup, then linear decay to the floor at total_steps, then the floor.
class LinearWithWarmup : public detail::FactorScheduler<LinearOptions> {
 public:
  /// Takes each param group's lr as its base lr and sets step 0's lrs at once.
  LinearWithWarmup(torch::optim::Optimizer& optimizer, const LinearOptions& options)
      : FactorScheduler(optimizer, options, "LinearWithWarmup") {}
};

/// Linear warmup, then half a cosine down to the floor at total_steps, then the floor.
class CosineWithWarmup : public detail::FactorScheduler<CosineOptions> {
 public:
  /// Takes each param group's lr as its base lr and sets step 0's lrs at once.
  CosineWithWarmup(torch::optim::Optimizer& optimizer, const CosineOptions& options)
      : FactorScheduler(optimizer, options, "CosineWithWarmup") {}
};

/// Linear warmup, then lr * sqrt(warmup_steps / step).
class InverseSqrt : public detail::FactorScheduler<InverseSqrtOptions> {
 public:
  /// Takes each param group's lr as its base lr and sets step 0's lrs at once.
  InverseSqrt(torch::optim::Optimizer& optimizer, const InverseSqrtOptions& options)
      : FactorScheduler(optimizer, options, "InverseSqrt") {}
};

}  // namespace accel::schedule
