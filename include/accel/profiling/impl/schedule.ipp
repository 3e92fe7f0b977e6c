// The profile schedule; schedule.hpp includes it in header-only mode.
#pragma once

#include "../../detail/error.hpp"
#include "../schedule.hpp"

namespace accel::profiling {

ACCEL_DECL ScheduleAction schedule_action(const ProfileSchedule& schedule, std::int64_t step) {
  if (step < schedule.skip_first) return ScheduleAction::none;
  step -= schedule.skip_first;
  const std::int64_t cycle = schedule.wait + schedule.warmup + schedule.active;
  if (schedule.repeat > 0 && step / cycle >= schedule.repeat) return ScheduleAction::none;
  const std::int64_t in_cycle = step % cycle;
  if (in_cycle < schedule.wait) return ScheduleAction::none;
  if (in_cycle < schedule.wait + schedule.warmup) return ScheduleAction::warmup;
  return in_cycle < cycle - 1 ? ScheduleAction::record : ScheduleAction::record_and_save;
}

ACCEL_DECL void check_schedule(const ProfileSchedule& schedule) {
  const struct {
    const char* name;
    std::int64_t value;
  } fields[] = {{"wait", schedule.wait},
                {"warmup", schedule.warmup},
                {"active", schedule.active},
                {"repeat", schedule.repeat},
                {"skip_first", schedule.skip_first}};
  for (const auto& field : fields)
    if (field.value < 0)
      accel::detail::fail("profile(): ProfileSchedule::{} is {}; steps are counted from 0 up, e.g. "
                   "{{.wait = 1, .warmup = 1, .active = 3, .repeat = 1}}",
                   field.name, field.value);
  if (schedule.active < 1)
    accel::detail::fail("profile(): ProfileSchedule::active is 0, so nothing would ever be recorded; "
                 "record at least one step, e.g. {{.wait = 1, .warmup = 1, .active = 3}}");
}

}  // namespace accel::profiling
