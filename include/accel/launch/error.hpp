// The exception the launcher throws for a bad option or environment, before any worker starts:
// an accel::Error (one family), thrown without {fmt} so that this part of the library stays free
// of {fmt} and torch and accel-launch compiles in seconds, not minutes.
#pragma once

#include <cerrno>
#include <string>
#include <system_error>

#include "../error.hpp"

namespace accel {

// Every message starts with "accel: ", names the offending value and says how to fix it.
class LaunchError : public Error {
 public:
  using Error::Error;
};

namespace launcher {

[[noreturn]] inline void fail(const std::string& message) {
  throw LaunchError("accel: " + message);
}

// "what: <strerror(errno)>", read at the call, before anything else can change errno.
[[noreturn]] inline void fail_with_errno(const std::string& what) {
  const int error = errno;
  fail(what + ": " + std::generic_category().message(error));
}

}  // namespace launcher
}  // namespace accel
