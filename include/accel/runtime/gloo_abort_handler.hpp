// A process-wide std::terminate handler, installed by the first ProcessGroup that is made (its
// constructor calls explain_gloo_aborts(); the later ones find it installed) and never removed:
// it changes how this whole process ends on any uncaught exception, not only the group's.
//
// Why: Gloo reports some errors from its own threads (a message of the wrong size: ranks that
// passed tensors of different dtypes or sizes to one collective), where nothing can catch them
// and the process ends through std::terminate. The handler says what that means. The usual cause
// is ranks in different collective calls at the same point (save_state on the main process only,
// under Zero3, whose next forward all-gathers as the save does): the handler then gives the
// stuck-collective watch a few seconds to find the peer's wait (StuckCollectiveWatch::
// compare_now), which ends the process with the line naming both calls and exit status 1. Only
// when no peer waits in another call does the default handler abort. For any other exception it
// prints nothing and calls the handler that was installed before it, then aborts as
// std::terminate would.
#pragma once

#include <fmt/format.h>
#include <gloo/common/logging.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "../detail/separate_compilation.hpp"
#include "stuck_collective.hpp"

namespace accel::runtime {

// How long the handler looks for a peer waiting in another call: a peer publishes its wait once
// it has lasted StuckCollectiveWatch::publish_after.
inline constexpr std::chrono::milliseconds gloo_abort_patience = std::chrono::seconds(5);

ACCEL_DECL void explain_gloo_aborts();

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/gloo_abort_handler.ipp"
#endif
