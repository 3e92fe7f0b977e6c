// Which process this is, and how environment variables are read as integers.
#pragma once

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "../detail/error.hpp"

namespace accel::runtime {

struct ProcessInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
};

// The integer value of an environment variable, or `fallback` when it is unset.
inline int env_int(const char* name, int fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  const std::string_view text(raw);
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size())
    detail::fail("{}='{}' is not an integer; set it to a number or unset it", name, text);
  return value;
}

}  // namespace accel::runtime
