// Where a parameter's own elements lie in the full tensor a checkpoint stores (contract.hpp's
// ParameterSlice and StateSlot carry one): element k of the flattened parameter is element
// (k / width) * stride + offset + k % width of the flattened full tensor. A tensor-parallel slice
// (tensor_parallel_placements.hpp) is rows of `width` elements, `stride` apart in the full
// tensor, the first at `offset`; width 0 says the parameter is the full tensor, as it is under
// every strategy without tensor parallelism.
#pragma once

#include <cstdint>

namespace accel::parallel {

struct Placement {
  std::int64_t width = 0;
  std::int64_t stride = 0;
  std::int64_t offset = 0;
  bool whole() const { return width == 0; }
};

}  // namespace accel::parallel
