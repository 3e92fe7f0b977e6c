// torch.profiler.schedule's decision for one step: what a profile does during the step-th
// optimizer step since it started (0-based). A pure function, so that its semantics are tested
// on their own (tests/unit/test_profile.cpp).
#pragma once

#include <cstdint>

#include "../detail/separate_compilation.hpp"
#include "../options/profiling.hpp"

namespace accel::profiling {

enum class ScheduleAction {
  none,             // not recorded (skip_first, wait, or past the last cycle)
  warmup,           // libtorch's profiler runs, nothing is kept
  record,           // recorded
  record_and_save,  // recorded, the cycle's last step: the trace is written when it ends
};

ACCEL_DECL ScheduleAction schedule_action(const ProfileSchedule& schedule, std::int64_t step);

// Refuses a schedule with a negative count or no active step, naming the field.
ACCEL_DECL void check_schedule(const ProfileSchedule& schedule);

}  // namespace accel::profiling

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/schedule.ipp"
#endif
