// Learning-rate schedules as plain functions of the step: the multiplier each schedule applies to
// a base lr at optimizer step k. No optimizer and no torch needed; the schedulers in
// ../schedules.hpp compute every lr through these. docs/how-to/schedules.md has the formulas.
//
// "Step k" is the k-th optimizer step, counted from 0: factor(k) scales the lr that step uses.
// This is HuggingFace transformers' convention (get_linear_schedule_with_warmup and friends,
// through PyTorch's LambdaLR): warmup step k uses k / warmup_steps, so step 0 runs at lr 0 and
// step warmup_steps is the first at the full lr.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <numbers>
#include <optional>
#include <string_view>

#include "../detail/error.hpp"

namespace accel::schedule {

/// Constant after a linear warmup (transformers' get_constant_schedule_with_warmup).
struct ConstantOptions {
  /// Steps of linear warmup from lr 0.
  std::int64_t warmup_steps = 0;
};

/// Linear decay after the warmup, from the full lr at warmup_steps to the floor at total_steps,
/// then the floor (transformers' get_linear_schedule_with_warmup when the floor is 0).
/// The floor is min_ratio times each param group's lr, or min_lr, one absolute lr for every
/// group (only where a base lr is known: scheduled_lr and the schedulers); set one of them.
struct LinearOptions {
  /// Steps of linear warmup from lr 0.
  std::int64_t warmup_steps = 0;
  /// The step the floor is reached at.
  std::int64_t total_steps = 0;
  /// The floor, as a fraction of each group's lr.
  double min_ratio = 0.0;
  /// The floor, as one absolute lr.
  std::optional<double> min_lr = std::nullopt;
};

/// Half a cosine after the warmup, from the full lr at warmup_steps to the floor at total_steps,
/// then the floor (transformers' get_cosine_schedule_with_warmup, and with a floor
/// get_cosine_with_min_lr_schedule_with_warmup; both keep following the cosine back up after
/// total_steps, which is never what a longer run wants, so here the floor holds).
struct CosineOptions {
  /// Steps of linear warmup from lr 0.
  std::int64_t warmup_steps = 0;
  /// The step the floor is reached at.
  std::int64_t total_steps = 0;
  /// The floor, as a fraction of each group's lr.
  double min_ratio = 0.0;
  /// The floor, as one absolute lr.
  std::optional<double> min_lr = std::nullopt;
};

/// Inverse square root after a linear warmup ("Attention is all you need", fairseq's
/// inverse_sqrt, transformers' get_inverse_sqrt_schedule with its default timescale):
/// sqrt(warmup_steps / k) from step warmup_steps on.
struct InverseSqrtOptions {
  /// Steps of linear warmup from lr 0.
  std::int64_t warmup_steps = 0;
};

template <class T>
concept ScheduleOptions = std::same_as<T, ConstantOptions> || std::same_as<T, LinearOptions> ||
                          std::same_as<T, CosineOptions> || std::same_as<T, InverseSqrtOptions>;

namespace detail {

template <class T>
concept DecayOptions = std::same_as<T, LinearOptions> || std::same_as<T, CosineOptions>;

// Argument checks: `who` names the function or scheduler the message is about.
inline void check_warmup(std::int64_t warmup_steps, std::int64_t at_least, std::string_view who,
                         std::string_view why) {
  if (warmup_steps < at_least)
    accel::detail::fail("{}: warmup_steps is {}; it must be at least {}{}", who, warmup_steps,
                        at_least, why);
}

inline void check(const ConstantOptions& options, std::string_view who) {
  check_warmup(options.warmup_steps, 0, who, "");
}

inline void check(const InverseSqrtOptions& options, std::string_view who) {
  // Step k >= warmup_steps runs at sqrt(warmup_steps / k): with no warmup, step 0 would divide
  // by zero and every later lr would be 0.
  check_warmup(options.warmup_steps, 1, who,
               ", since after the warmup the lr is lr * sqrt(warmup_steps / step)");
}

template <DecayOptions Options>
void check(const Options& options, std::string_view who) {
  check_warmup(options.warmup_steps, 0, who, "");
  if (options.total_steps < 1)
    accel::detail::fail("{}: total_steps is {}; it must be at least 1: the optimizer step at "
                        "which the decay reaches its floor (the run's length)",
                        who, options.total_steps);
  if (options.warmup_steps > options.total_steps)
    accel::detail::fail("{}: warmup_steps is {}, more than total_steps {}; lower warmup_steps "
                        "or raise total_steps",
                        who, options.warmup_steps, options.total_steps);
  // Written so that NaN fails too.
  if (!(options.min_ratio >= 0.0 && options.min_ratio <= 1.0))
    accel::detail::fail("{}: min_ratio is {}; it must be from 0 to 1 (the floor as a fraction "
                        "of each param group's lr)",
                        who, options.min_ratio);
  if (options.min_lr.has_value()) {
    if (!(*options.min_lr >= 0.0))
      accel::detail::fail("{}: min_lr is {}; it must be at least 0", who, *options.min_lr);
    if (options.min_ratio != 0.0)
      accel::detail::fail("{}: both min_ratio ({}) and min_lr ({}) are set; set one of them "
                          "(min_ratio scales with each param group's lr, min_lr is one lr for "
                          "all)",
                          who, options.min_ratio, *options.min_lr);
  }
}

inline void check_step(std::int64_t step, std::string_view who) {
  if (step < 0)
    accel::detail::fail("{}: step is {}; it must be at least 0 (optimizer steps count from 0)",
                        who, step);
}

// `what` says whose lr it is ("base_lr", "param group 1's lr").
template <ScheduleOptions Options>
void check_base_lr(double base_lr, const Options& options, std::string_view who,
                   std::string_view what) {
  if (!(base_lr >= 0.0) || !std::isfinite(base_lr))
    accel::detail::fail("{}: {} is {}; it must be a finite lr of at least 0", who, what, base_lr);
  if constexpr (DecayOptions<Options>) {
    if (options.min_lr.has_value() && *options.min_lr > base_lr)
      accel::detail::fail("{}: min_lr {} is above {} {}; lower min_lr, or set min_ratio (a "
                          "fraction of each param group's lr) instead",
                          who, *options.min_lr, what, base_lr);
  }
}

// The warmup, as transformers writes it: k / max(1, warmup_steps).
inline double warmup(std::int64_t step, std::int64_t warmup_steps) {
  return static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, warmup_steps));
}

// The factors, arguments already checked; min_lr is not looked at (scheduled_lr turns it into a
// min_ratio first). Each is transformers' expression, in its order of operations.
inline double factor(std::int64_t step, const ConstantOptions& options) {
  return step < options.warmup_steps ? warmup(step, options.warmup_steps) : 1.0;
}

inline double factor(std::int64_t step, const LinearOptions& options) {
  if (step < options.warmup_steps) return warmup(step, options.warmup_steps);
  if (step >= options.total_steps) return options.min_ratio;
  const double left = static_cast<double>(options.total_steps - step) /
                      static_cast<double>(options.total_steps - options.warmup_steps);
  return left * (1.0 - options.min_ratio) + options.min_ratio;
}

inline double factor(std::int64_t step, const CosineOptions& options) {
  if (step < options.warmup_steps) return warmup(step, options.warmup_steps);
  // From total_steps on the floor holds (cos(pi) is -1 exactly, so the formula gives the same
  // value at total_steps itself).
  if (step >= options.total_steps) return options.min_ratio;
  const double progress = static_cast<double>(step - options.warmup_steps) /
                          static_cast<double>(options.total_steps - options.warmup_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return cosine * (1.0 - options.min_ratio) + options.min_ratio;
}

inline double factor(std::int64_t step, const InverseSqrtOptions& options) {
  if (step < options.warmup_steps) return warmup(step, options.warmup_steps);
  return 1.0 / std::sqrt(static_cast<double>(step) / static_cast<double>(options.warmup_steps));
}

// The lr at `step` for a base lr, arguments already checked. min_lr becomes the ratio
// min_lr / base_lr (as transformers' min_lr option does), so every lr is base_lr * factor.
template <ScheduleOptions Options>
double lr(std::int64_t step, double base_lr, Options options) {
  if constexpr (DecayOptions<Options>) {
    if (options.min_lr.has_value()) {
      // check_base_lr made min_lr <= base_lr, so a base lr of 0 has a floor of 0.
      options.min_ratio = base_lr > 0.0 ? *options.min_lr / base_lr : 0.0;
      options.min_lr.reset();
    }
  }
  return base_lr * factor(step, options);
}

// A factor function's checks: a factor has no base lr to turn min_lr into a ratio with.
template <ScheduleOptions Options>
void check_factor_call(std::int64_t step, const Options& options, std::string_view who) {
  check_step(step, who);
  check(options, who);
  if constexpr (DecayOptions<Options>) {
    if (options.min_lr.has_value())
      accel::detail::fail("{}: min_lr is set ({}), and a factor has no base lr to take it from; "
                          "call accel::schedule::scheduled_lr(step, base_lr, options), or set "
                          "min_ratio instead",
                          who, *options.min_lr);
  }
}

}  // namespace detail

/// @{
/// The multiplier of the base lr at optimizer step `step` (from 0).
inline double constant_with_warmup_factor(std::int64_t step, const ConstantOptions& options) {
  detail::check_factor_call(step, options, "constant_with_warmup_factor");
  return detail::factor(step, options);
}

inline double linear_with_warmup_factor(std::int64_t step, const LinearOptions& options) {
  detail::check_factor_call(step, options, "linear_with_warmup_factor");
  return detail::factor(step, options);
}

inline double cosine_with_warmup_factor(std::int64_t step, const CosineOptions& options) {
  detail::check_factor_call(step, options, "cosine_with_warmup_factor");
  return detail::factor(step, options);
}

inline double inverse_sqrt_factor(std::int64_t step, const InverseSqrtOptions& options) {
  detail::check_factor_call(step, options, "inverse_sqrt_factor");
  return detail::factor(step, options);
}
/// @}

/// The lr at optimizer step `step` of a parameter group whose own lr is base_lr, for any of the
/// four schedules (min_lr included): what the schedulers put in the optimizer, bit for bit.
template <ScheduleOptions Options>
double scheduled_lr(std::int64_t step, double base_lr, const Options& options) {
  detail::check_step(step, "scheduled_lr");
  detail::check(options, "scheduled_lr");
  detail::check_base_lr(base_lr, options, "scheduled_lr", "base_lr");
  return detail::lr(step, base_lr, options);
}

}  // namespace accel::schedule
