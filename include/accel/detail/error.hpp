// The helper that formats and throws accel's `accel: ` errors (the type: ../error.hpp).
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>

#include "../error.hpp"

namespace accel {

namespace detail {

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error("accel: " + fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace detail
}  // namespace accel
