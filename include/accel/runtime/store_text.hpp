// Text into and out of a c10d store, whose values are byte vectors: what the rendezvous
// (admission.hpp), the group's teardown (c10d_transport.hpp) and checks (collective_check.hpp)
// and the stuck-collective watch keep there is text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace accel::runtime {

inline std::vector<std::uint8_t> store_bytes(std::string_view text) {
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

inline std::string store_text(const std::vector<std::uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace accel::runtime
