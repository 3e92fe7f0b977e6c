// Regions; regions.hpp includes it in header-only mode.
#pragma once

#include "../regions.hpp"

namespace accel::runtime::shm {

ACCEL_DECL Regions::Regions(Segment segment, int rank, int size, std::size_t bytes)
    : segment_(std::move(segment)), rank_(rank), bytes_(bytes) {
  if (segment_.size() != segment_bytes(size, bytes))
    accel::detail::fail("internal: the shared-memory segment {} has {} bytes; {} regions of {} "
                        "bytes need {}",
                        segment_.name(), segment_.size(), size, bytes, segment_bytes(size, bytes));
  for (int r = 0; r < size; ++r)
    bases_.push_back(segment_.data() + static_cast<std::size_t>(r) * stride(bytes));
}

}  // namespace accel::runtime::shm
