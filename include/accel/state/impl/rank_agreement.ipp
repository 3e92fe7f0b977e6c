// The ranks' agreement on a checkpoint step; rank_agreement.hpp includes it in header-only mode.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <vector>

#include "../../error.hpp"
#include "../../runtime/collectives.hpp"
#include "../rank_agreement.hpp"

namespace accel::state::detail {

ACCEL_DECL void agree(runtime::ProcessGroup* group, const std::string& error, const char* what) {
  std::vector<std::string> errors{error};
  if (group != nullptr) errors = runtime::gather_object(group, error);
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) {
      if (static_cast<int>(r) == (group ? group->rank() : 0)) throw Error(errors[r]);
      throw Error(fmt::format("accel: {}: rank {} failed: {}", what, r, errors[r]));
    }
}

ACCEL_DECL std::string broadcast_string(runtime::ProcessGroup* group, const std::string& value) {
  if (group == nullptr) return value;
  return runtime::gather_object(group, value).front();
}

}  // namespace accel::state::detail
