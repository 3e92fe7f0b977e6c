// The text of an error from c10d or Gloo, fit for the one line of an accel error: c10's errors
// carry a C++ stack trace in what() (17 frames for a rendezvous timeout), which says nothing to
// the user and buries the message.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <string_view>

namespace accel::runtime {

inline std::string error_line(const std::exception& error) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  const std::string_view text =
      torch_error != nullptr ? torch_error->what_without_backtrace() : error.what();
  return std::string(text.substr(0, text.find('\n')));
}

}  // namespace accel::runtime
