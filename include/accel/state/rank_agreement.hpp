// Every rank's outcome of a checkpoint step that may fail on some ranks only (a full disk, a
// file one rank cannot read, a value one rank refuses): all of them learn of the first failure
// and throw it, so that no rank goes on alone, into a collective the others never reach or
// applying a checkpoint the others refused. Used by checkpoint_io.hpp and model_files.hpp.
#pragma once

#include <exception>
#include <string>

#include "../detail/separate_compilation.hpp"
#include "../runtime/process_group.hpp"

namespace accel::state::detail {

// The message of what `step` threw, or "" if it returned.
template <class F>
std::string error_of(F&& step) {
  try {
    step();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// Gathers every rank's `error` ("" for none) and throws the first: this rank's own as it is,
// another's as "accel: <what>: rank <r> failed: <its message>". On one process (no group) only
// this rank's.
ACCEL_DECL void agree(runtime::ProcessGroup* group, const std::string& error, const char* what);

// Rank 0's `value` on every rank.
ACCEL_DECL std::string broadcast_string(runtime::ProcessGroup* group, const std::string& value);

}  // namespace accel::state::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/rank_agreement.ipp"
#endif
