// This process's resident memory as the kernel counts it: now (VmRSS) and the peak since the
// process started or since reset_peak_resident() (VmHWM), what a cluster's memory limit checks and
// what accel's benchmarks and memory tests report. Read from /proc/self/status, so Linux only:
// elsewhere, or without /proc, the readers return nullopt and the reset false.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

namespace accel::memory {

namespace detail {
// The value of /proc/self/status's line `key` ("VmHWM:"), given in kB there, in bytes.
inline std::optional<std::int64_t> status_bytes(std::string_view key) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  return std::nullopt;
}
}  // namespace detail

inline std::optional<std::int64_t> resident_bytes() { return detail::status_bytes("VmRSS:"); }
inline std::optional<std::int64_t> peak_resident_bytes() {
  return detail::status_bytes("VmHWM:");
}

// Lowers the peak to the current resident size (Linux 4.0 and later: "5" to clear_refs), so that
// peak_resident_bytes() measures a phase; whether the kernel took it.
inline bool reset_peak_resident() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  return static_cast<bool>(clear_refs << "5" << std::flush);
}

}  // namespace accel::memory
