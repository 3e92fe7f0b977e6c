// The step timeline's rows: every rank's finished steps (Recorder::take_steps) gathered with one
// all-gather of a few doubles per step, and turned into the metrics the trackers log, the same
// on every rank (each rank calls log(), the main process writes):
//
//   timeline/rank<r>/{step,data,forward,backward,communication,optimizer,idle}   seconds
//   timeline/step_seconds          the slowest rank's step: the job's step time
//   timeline/samples_per_second    with TimelineOptions::samples_per_step
//   timeline/tokens_per_second     with TimelineOptions::tokens_per_step
//   timeline/mfu                   with samples_per_step, flops_per_sample and peak_flops
//
// Gathered rather than written per rank: one collective of ~64 bytes per step and rank costs
// microseconds over shared memory (docs/how-to/profiling.md, "Cost"), and keeps every rank's numbers in
// the run's one metrics file, where accel-plot draws the ranks side by side.
#pragma once

#include <cstdint>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "../options/profiling.hpp"
#include "../profiling/records.hpp"
#include "../runtime/process_group.hpp"
#include "values.hpp"

namespace accel::profiling {

struct TimelineRow {
  std::int64_t step = 0;
  tracking::Metrics metrics;
};

// `per_rank[r]`: rank r's steps, the same count on every rank.
ACCEL_DECL std::vector<TimelineRow> timeline_rows(
    const std::vector<std::vector<StepTimes>>& per_rank, const TimelineOptions& options);

// Every rank's steps, in rank order: one all-gather (none on one process). Collective.
ACCEL_DECL std::vector<std::vector<StepTimes>> gather_steps(runtime::ProcessGroup* group,
                                                            const std::vector<StepTimes>& mine);

// Refuses a TimelineOptions value out of range, naming it.
ACCEL_DECL void check_timeline_options(const TimelineOptions& options);

}  // namespace accel::profiling

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/timeline.ipp"
#endif
