// The step timeline's rows; timeline.hpp includes it in header-only mode.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "../../detail/error.hpp"
#include "../timeline.hpp"

namespace accel::profiling {

namespace detail {
// The doubles one step travels as: step, total, the phases, idle.
inline constexpr std::int64_t step_width = 3 + static_cast<std::int64_t>(phase_count);
}  // namespace detail

ACCEL_DECL std::vector<TimelineRow> timeline_rows(
    const std::vector<std::vector<StepTimes>>& per_rank, const TimelineOptions& options) {
  std::vector<TimelineRow> rows;
  if (per_rank.empty()) return rows;
  const std::size_t steps = per_rank.front().size();
  const double world = static_cast<double>(per_rank.size());
  for (std::size_t i = 0; i < steps; ++i) {
    TimelineRow row;
    row.step = per_rank.front()[i].step;
    double slowest = 0;
    for (std::size_t r = 0; r < per_rank.size(); ++r) {
      const StepTimes& times = per_rank[r][i];
      const std::string prefix = fmt::format("timeline/rank{}/", r);
      row.metrics.emplace_back(prefix + "step", times.total);
      for (std::size_t p = 0; p < phase_count; ++p)
        row.metrics.emplace_back(prefix + phase_names[p], times.phases[p]);
      row.metrics.emplace_back(prefix + "idle", times.idle);
      slowest = std::max(slowest, times.total);
    }
    row.metrics.emplace_back("timeline/step_seconds", slowest);
    if (slowest > 0) {
      if (options.samples_per_step > 0)
        row.metrics.emplace_back("timeline/samples_per_second", options.samples_per_step / slowest);
      if (options.tokens_per_step > 0)
        row.metrics.emplace_back("timeline/tokens_per_second", options.tokens_per_step / slowest);
      if (options.samples_per_step > 0 && options.flops_per_sample > 0 && options.peak_flops > 0)
        row.metrics.emplace_back("timeline/mfu", options.flops_per_sample *
                                                     options.samples_per_step / slowest /
                                                     (options.peak_flops * world));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

ACCEL_DECL std::vector<std::vector<StepTimes>> gather_steps(runtime::ProcessGroup* group,
                                                            const std::vector<StepTimes>& mine) {
  if (group == nullptr || group->size() == 1) return {mine};
  const auto count = static_cast<std::int64_t>(mine.size());
  torch::Tensor packed = torch::empty({count, detail::step_width}, torch::kDouble);
  auto* out = packed.data_ptr<double>();
  for (const StepTimes& step : mine) {
    *out++ = static_cast<double>(step.step);
    *out++ = step.total;
    for (const double phase : step.phases) *out++ = phase;
    *out++ = step.idle;
  }
  const runtime::ProcessGroup::Caller caller(group, "the step timeline");
  // [world x count x width]: every rank closes the same steps (the same loop on every rank).
  const torch::Tensor all = group->allgather(packed.reshape({1, count, detail::step_width}));
  std::vector<std::vector<StepTimes>> per_rank(static_cast<std::size_t>(group->size()));
  const double* in = all.data_ptr<double>();
  for (auto& steps : per_rank)
    for (std::int64_t i = 0; i < count; ++i) {
      StepTimes step;
      step.step = static_cast<std::int64_t>(*in++);
      step.total = *in++;
      for (double& phase : step.phases) phase = *in++;
      step.idle = *in++;
      steps.push_back(step);
    }
  return per_rank;
}

ACCEL_DECL void check_timeline_options(const TimelineOptions& options) {
  if (options.every < 1)
    accel::detail::fail("Options::timeline.every is {}; gather the timeline every 1 or more "
                        "steps (1: each step)",
                        options.every);
  const struct {
    const char* name;
    double value;
  } fields[] = {{"samples_per_step", options.samples_per_step},
                {"tokens_per_step", options.tokens_per_step},
                {"flops_per_sample", options.flops_per_sample},
                {"peak_flops", options.peak_flops}};
  for (const auto& field : fields)
    if (!(field.value >= 0) || !std::isfinite(field.value))
      accel::detail::fail("Options::timeline.{} is {}; give a finite number >= 0 (0 leaves what "
                          "it gives out)",
                          field.name, field.value);
}

}  // namespace accel::profiling
