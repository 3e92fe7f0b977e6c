// The checksum every checkpoint file carries in its manifest: XXH3-64 (libxxhash, used header-only
// through XXH_INLINE_ALL), which hashes at memory speed, so verifying a checkpoint on load costs
// about as much as reading it. It detects corruption (a flipped bit, a truncated file); it is not
// a cryptographic signature against someone who can write the folder.
#pragma once

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

namespace accel::state {

inline std::uint64_t checksum(const void* data, std::size_t size) {
  return XXH3_64bits(data, size);
}

// The same hash over bytes that arrive in pieces (a file as it is written).
class StreamingChecksum {
 public:
  StreamingChecksum() : state_(XXH3_createState()) {
    if (state_ == nullptr) throw std::bad_alloc();
    XXH3_64bits_reset(state_);
  }
  ~StreamingChecksum() { XXH3_freeState(state_); }
  StreamingChecksum(const StreamingChecksum&) = delete;
  StreamingChecksum& operator=(const StreamingChecksum&) = delete;
  void update(const void* data, std::size_t size) { XXH3_64bits_update(state_, data, size); }
  std::uint64_t value() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

// As the manifest spells it: 16 lowercase hex digits.
inline std::string checksum_hex(std::uint64_t value) { return fmt::format("{:016x}", value); }

}  // namespace accel::state
