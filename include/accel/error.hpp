// The one exception family accel throws: accel::Error, and the launcher's LaunchError derived
// from it (launch/error.hpp), so that `catch (const accel::Error&)` sees both. This header has
// no dependency at all; the formatting helper lives in detail/error.hpp.
#pragma once

#include <stdexcept>

namespace accel {

// Every run-time error accel raises: bad environment, bad input, a misused API. The message
// starts with "accel: ", names the offending value and says how to fix it.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace accel
