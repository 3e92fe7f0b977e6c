// CRC-32C (Castagnoli), the checksum of TFRecord framing, which TensorBoard's event files use
// (event_file.hpp): each record carries one over its length and one over its data, so that a
// reader tells a cut or damaged record from a whole one. Bitwise with a 256-entry table made at
// compile time: a few hundred bytes per logged step need nothing faster (no SSE4.2 instruction,
// which would tie the header to x86).
#pragma once

#include <cstdint>
#include <string_view>

#include "../detail/separate_compilation.hpp"

namespace accel::tracking {

/// CRC-32C of `bytes` (polynomial 0x1EDC6F41, reflected; crc32c("123456789") is 0xE3069283).
ACCEL_DECL std::uint32_t crc32c(std::string_view bytes);

/// The CRC as TFRecord stores it: rotated right by 15 bits plus 0xa282ead8, so that the CRC of
/// bytes that themselves hold CRCs is not trivially related to theirs.
ACCEL_DECL std::uint32_t masked_crc32c(std::string_view bytes);

}  // namespace accel::tracking

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/crc32c.ipp"
#endif
