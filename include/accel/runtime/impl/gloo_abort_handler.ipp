// The handler for Gloo's aborts; gloo_abort_handler.hpp includes it in header-only mode.
#pragma once

#include "../gloo_abort_handler.hpp"

namespace accel::runtime {

ACCEL_DECL void explain_gloo_aborts() {
  static const std::terminate_handler previous = std::set_terminate([] {
    try {
      if (const auto error = std::current_exception()) std::rethrow_exception(error);
    } catch (const gloo::EnforceNotMet& error) {
      fmt::print(stderr,
                 "accel: Gloo stopped this process: {}\naccel: the ranks most likely passed "
                 "tensors of different dtypes or sizes to the same collective, or called "
                 "different collectives at the same point; every rank must pass the same; "
                 "Options::check_collectives (ACCEL_CHECK_COLLECTIVES=1) names the mismatched "
                 "calls\n",
                 error.what());
      std::fflush(stderr);
      // Ends the process (exit 1) naming both calls when a peer waits in another one.
      StuckCollectiveWatch::compare_now(gloo_abort_patience);
    } catch (...) {
    }
    if (previous != nullptr) previous();
    std::abort();
  });
}

}  // namespace accel::runtime
