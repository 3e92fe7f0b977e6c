// "SIGKILL" rather than "signal 9" in the launcher's summary.
#pragma once

#include <csignal>
#include <string>
#include <utility>

#include "../detail/separate_compilation.hpp"

namespace accel::launcher {

ACCEL_DECL std::string signal_name(int signal);

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/signal_names.ipp"
#endif
