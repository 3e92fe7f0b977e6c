// Protocol Buffers' wire format (protobuf_wire.hpp); protobuf_wire.hpp includes it in
// header-only mode, impl/src.hpp in the separately compiled one.
#include <bit>

#include "../protobuf_wire.hpp"

namespace accel::tracking::protobuf {

ACCEL_DECL void MessageWriter::varint(int field, std::uint64_t value) {
  key(field, 0);
  raw_varint(value);
}

ACCEL_DECL void MessageWriter::fixed64(int field, double value) {
  key(field, 1);
  const auto bits = std::bit_cast<std::uint64_t>(value);
  for (int shift = 0; shift < 64; shift += 8) data_.push_back(static_cast<char>(bits >> shift));
}

ACCEL_DECL void MessageWriter::fixed32(int field, float value) {
  key(field, 5);
  const auto bits = std::bit_cast<std::uint32_t>(value);
  for (int shift = 0; shift < 32; shift += 8) data_.push_back(static_cast<char>(bits >> shift));
}

ACCEL_DECL void MessageWriter::bytes(int field, std::string_view value) {
  key(field, 2);
  raw_varint(value.size());
  data_.append(value);
}

ACCEL_DECL void MessageWriter::key(int field, int wire_type) {
  raw_varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire_type));
}

// Seven bits a byte, the lowest first; the top bit says another byte follows.
ACCEL_DECL void MessageWriter::raw_varint(std::uint64_t value) {
  while (value >= 0x80) {
    data_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  data_.push_back(static_cast<char>(value));
}

}  // namespace accel::tracking::protobuf
