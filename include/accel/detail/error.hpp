// The one exception type accel throws, and the helper that formats its `accel: ` messages.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace accel {

// Every run-time error accel raises: bad environment, bad input, a misused API. The message
// starts with "accel: ", names the offending value and says how to fix it.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error("accel: " + fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace detail
}  // namespace accel
