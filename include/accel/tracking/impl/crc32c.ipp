// CRC-32C (crc32c.hpp); crc32c.hpp includes it in header-only mode, impl/src.hpp in the
// separately compiled one.
#include <array>

#include "../crc32c.hpp"

namespace accel::tracking {

namespace crc32c_detail {
// table[b]: the CRC register after shifting the byte b through it, the reflected polynomial
// 0x82F63B78 applied bit by bit.
constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t byte = 0; byte < 256; ++byte) {
    std::uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1U) != 0 ? 0x82F63B78U : 0U);
    table[byte] = crc;
  }
  return table;
}
inline constexpr std::array<std::uint32_t, 256> table = make_table();
}  // namespace crc32c_detail

ACCEL_DECL std::uint32_t crc32c(std::string_view bytes) {
  std::uint32_t crc = 0xFFFFFFFFU;
  for (const char c : bytes)
    crc = (crc >> 8) ^ crc32c_detail::table[(crc ^ static_cast<unsigned char>(c)) & 0xFFU];
  return crc ^ 0xFFFFFFFFU;
}

ACCEL_DECL std::uint32_t masked_crc32c(std::string_view bytes) {
  const std::uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8U;
}

}  // namespace accel::tracking
