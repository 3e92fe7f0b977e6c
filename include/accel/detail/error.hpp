// The helper that formats and throws accel's `accel: ` errors (the type: ../error.hpp).
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include "../error.hpp"

namespace accel {

namespace detail {

// How many accel errors this process has raised: a process group that sees the count grow
// knows its rank is leaving because of one, even when the user caught it.
inline std::atomic<std::uint64_t>& error_counter() {
  static std::atomic<std::uint64_t> count{0};
  return count;
}
inline std::uint64_t errors_raised() { return error_counter().load(); }

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  ++error_counter();
  throw Error("accel: " + fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace detail
}  // namespace accel
