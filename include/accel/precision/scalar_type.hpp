// The torch dtype of each policy::ComputeType, every one mapped explicitly: a ComputeType added
// later is a -Wswitch error here rather than a quiet float32.
#pragma once

#include <torch/torch.h>

#include "../detail/error.hpp"
#include "../detail/torch_compat.hpp"
#include "../policy/compute_type.hpp"

namespace accel::precision {

constexpr c10::ScalarType to_scalar_type(policy::ComputeType type) {
  switch (type) {
    case policy::ComputeType::float32:
      return c10::ScalarType::Float;
    case policy::ComputeType::bfloat16:
      return c10::ScalarType::BFloat16;
    case policy::ComputeType::float16:
      return c10::ScalarType::Half;
    case policy::ComputeType::float8:
      // e4m3: the forward dtype (e5m2 is for gradients). libtorch before 2.1 has no float8.
      if (detail::float8_e4m3_dtype) return *detail::float8_e4m3_dtype;
      detail::fail("float8 needs libtorch 2.1 or newer, and this is libtorch {}; use Bf16",
                   TORCH_VERSION);
  }
  detail::fail("ComputeType {} has no torch dtype", static_cast<int>(type));
}

}  // namespace accel::precision
