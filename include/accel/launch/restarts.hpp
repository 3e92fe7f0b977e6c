// Restarts, as torchrun's --max-restarts: when a worker fails, the launcher stops the whole
// group (as it does for any failure) and starts every worker again, with a fresh rendezvous, up
// to LaunchOptions::max_restarts times. Each worker learns which start it is from
// ACCEL_RESTART_COUNT (0 at first) and the limit from ACCEL_MAX_RESTARTS; torchrun's
// TORCHELASTIC_RESTART_COUNT and TORCHELASTIC_MAX_RESTARTS are set to the same, for programs
// written for torchrun. A program resumes from its own checkpoint when the count is above 0.
//
// Not restarted: a launch that succeeded, one stopped by a signal to the launcher (the user
// asked it to stop), and one whose worker could not even start (a missing program would fail
// the same way every time).
#pragma once

#include <string>

#include "environment.hpp"
#include "options.hpp"

namespace accel::launcher {

inline Variables with_restart_count(Variables variables, const LaunchOptions& options,
                                    int restart) {
  for (const char* name : {"ACCEL_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"})
    variables.emplace_back(name, std::to_string(restart));
  for (const char* name : {"ACCEL_MAX_RESTARTS", "TORCHELASTIC_MAX_RESTARTS"})
    variables.emplace_back(name, std::to_string(options.max_restarts));
  return variables;
}

}  // namespace accel::launcher
