// The helper that formats and throws accel's `accel: ` errors (the type: ../error.hpp).
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "../error.hpp"

namespace accel {

namespace detail {

// The one place an error is formatted and thrown. Not a template, and cold: the many call sites
// each instantiate only fail() below, which packs its arguments and calls this, instead of a
// copy of fmt::format and the string concatenation (docs/dev/build-time.md).
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_error(fmt::string_view format,
                                                                fmt::format_args args) {
  // fmt::vformat, compiled in libfmt; fmt::vformat_to into a string would compile fmt's whole
  // formatting engine into the translation unit again.
  throw Error("accel: " + fmt::vformat(format, args));
}

// Another accel error's message, without its "accel: ", to be quoted inside a new one.
inline std::string_view without_accel_prefix(std::string_view message) {
  constexpr std::string_view prefix = "accel: ";
  if (message.starts_with(prefix)) message.remove_prefix(prefix.size());
  return message;
}

template <class... Args>
[[noreturn, gnu::cold]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw_error(format, fmt::make_format_args(args...));
}

}  // namespace detail
}  // namespace accel
