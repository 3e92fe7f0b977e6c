// Torch-free names for the dtypes a policy computes in or sends gradients in; precision/ maps
// them to torch dtypes (precision/scalar_type.hpp).
#pragma once

namespace accel::policy {

enum class ComputeType { float32, bfloat16, float16, float8 };

}  // namespace accel::policy
