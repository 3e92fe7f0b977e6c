// shape_text(); shape_text.hpp includes it in header-only mode.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "../shape_text.hpp"

namespace accel::detail {

ACCEL_DECL std::string shape_text(c10::IntArrayRef sizes, std::string_view separator) {
  return fmt::format("{}", fmt::join(sizes, separator));
}

}  // namespace accel::detail
