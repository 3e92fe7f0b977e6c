// A process-wide std::terminate handler, installed by the first ProcessGroup that is made (its
// constructor calls explain_gloo_aborts(); the later ones find it installed) and never removed:
// it changes how this whole process ends on any uncaught exception, not only the group's.
//
// Why: Gloo reports some errors from its own threads (a message of the wrong size: ranks that
// passed tensors of different dtypes or sizes to one collective), where nothing can catch them
// and the process ends through std::terminate. The handler says what that means before the
// default handler aborts. For any other exception it prints nothing and calls the handler that
// was installed before it, then aborts as std::terminate would.
#pragma once

#include <fmt/format.h>
#include <gloo/common/logging.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "../detail/separate_compilation.hpp"

namespace accel::runtime {

ACCEL_DECL void explain_gloo_aborts();

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/gloo_abort_handler.ipp"
#endif
