// Level names; logging.hpp includes this file in header-only mode.
#pragma once

#include <array>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "../../detail/error.hpp"
#include "../logging.hpp"

namespace accel::logging {

namespace detail {

inline constexpr std::array<std::string_view, 4> level_names = {"DEBUG", "INFO", "WARNING",
                                                                "ERROR"};

inline std::optional<Level> find_level(std::string_view name) {
  for (std::size_t i = 0; i < level_names.size(); ++i) {
    const std::string_view known = level_names[i];
    bool same = name.size() == known.size();
    for (std::size_t c = 0; same && c < name.size(); ++c)
      same = (name[c] >= 'a' && name[c] <= 'z' ? static_cast<char>(name[c] - 'a' + 'A')
                                                 : name[c]) == known[c];
    if (same) return static_cast<Level>(i);
  }
  return std::nullopt;
}

}  // namespace detail

ACCEL_DECL std::string_view level_name(Level level) {
  return detail::level_names[static_cast<std::size_t>(level)];
}

ACCEL_DECL Level parse_level(std::string_view name) {
  if (const auto level = detail::find_level(name)) return *level;
  accel::detail::fail("'{}' is not a log level; use debug, info, warning or error", name);
}

ACCEL_DECL Level level_from_environment() {
  const char* set = std::getenv("ACCEL_LOG_LEVEL");
  if (set == nullptr || *set == '\0') return Level::info;
  if (const auto level = detail::find_level(set)) return *level;
  accel::detail::fail("ACCEL_LOG_LEVEL='{}' is not a log level; set it to debug, info, warning "
                      "or error (in any case), or unset it",
                      set);
}

}  // namespace accel::logging
