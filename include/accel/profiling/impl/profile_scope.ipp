// The profile's scope; profile_scope.hpp includes it in header-only mode.
#pragma once

#include <exception>
#include <utility>

#include "../profile_scope.hpp"

namespace accel::profiling {

ACCEL_DECL Profile::~Profile() noexcept(false) {
  if (recorder_.expired()) return;
  if (std::uncaught_exceptions() == 0) {
    close();
    return;
  }
  try {
    close();
  } catch (const std::exception&) {
    // The exception unwinding is the one to report.
  }
}

ACCEL_DECL void Profile::close() {
  if (const std::shared_ptr<Recorder> recorder = std::exchange(recorder_, {}).lock())
    recorder->stop_trace();
}

}  // namespace accel::profiling
