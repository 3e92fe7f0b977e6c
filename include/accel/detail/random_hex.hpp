// Random bytes from the kernel (getrandom(2), the pool behind /dev/urandom), as hex: names and
// identities that nobody else can guess, for the launcher (a run's identity) and the runtime (a
// shared-memory segment's name). No dependency beyond glibc, so the launcher stays free of torch.
#pragma once

#include <sys/random.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../error.hpp"

namespace accel::detail {

// `bytes` random bytes as 2 x `bytes` lowercase hex digits. getrandom() blocks only until the
// kernel's pool is first initialised, at boot; it fails only on kernels older than 3.17.
inline std::string random_hex(std::size_t bytes) {
  std::vector<std::uint8_t> data(bytes);
  std::size_t filled = 0;
  while (filled < bytes) {
    const ssize_t count = ::getrandom(data.data() + filled, bytes - filled, 0);
    if (count < 0) {
      if (errno == EINTR) continue;
      throw Error("accel: getrandom() failed; accel needs Linux 3.17 or later for random names");
    }
    filled += static_cast<std::size_t>(count);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * bytes);
  for (const std::uint8_t byte : data) {
    text.push_back(digits[byte >> 4]);
    text.push_back(digits[byte & 15]);
  }
  return text;
}

}  // namespace accel::detail
