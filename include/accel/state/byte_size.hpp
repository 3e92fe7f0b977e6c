// Byte counts as people write and read them: "--max-shard-size 5GB" parsed, "1.5 GiB" printed.
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "../detail/error.hpp"

namespace accel::state::detail {

// "10GB", "500MB", "2GiB", "1000000": transformers' spelling of max_shard_size, and bytes. A
// size of 2^64 bytes or more is refused, not wrapped around (17179869185GiB is not 1 GiB).
// `option` names it in the error.
inline std::uint64_t parse_byte_size(std::string_view text,
                                     std::string_view option = "--max-shard-size") {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  static constexpr std::pair<std::string_view, std::uint64_t> units[] = {
      {"", 1},         {"B", 1},         {"KB", 1000},     {"MB", 1000'000},
      {"GB", 1000'000'000}, {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30}};
  for (const auto& [name, scale] : units) {
    if (unit != name || text.empty() || end == text.data()) continue;
    if (error == std::errc::result_out_of_range ||
        (error == std::errc() && value > std::numeric_limits<std::uint64_t>::max() / scale))
      accel::detail::fail("{} '{}' is 2^64 bytes (16 EiB) or more, beyond any size accel can "
                          "count; give a smaller size, e.g. 5GB",
                          option, text);
    if (error == std::errc() && value > 0) return value * scale;
  }
  accel::detail::fail("{} '{}' is not a size; write bytes or a number with KB, MB, GB (powers "
                      "of 1000) or KiB, MiB, GiB, e.g. 5GB",
                      option, text);
}

inline std::string byte_size_text(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (1ULL << 20)) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < (1ULL << 30)) return fmt::format("{:.1f} MiB", bytes / double(1ULL << 20));
  return fmt::format("{:.2f} GiB", bytes / double(1ULL << 30));
}

}  // namespace accel::state::detail
