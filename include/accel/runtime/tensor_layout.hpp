// A tensor's dtype and shape as int64s, which a broadcast sends with its data (CPU) or ahead of
// it (CUDA, over Gloo), so that a rank that passed a tensor of the same byte size but another
// dtype or shape fails naming both layouts instead of reading garbage; the text that names one
// ("a Float tensor of shape [2, 3]"); and the CPU broadcast's payload, layout then bytes.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "../detail/small_tensor.hpp"

namespace accel::runtime {

// [dtype, ndim, d0..d7] (dimensions past the eighth folded into the eighth).
ACCEL_DECL torch::Tensor describe_layout(const torch::Tensor& t);

ACCEL_DECL std::string layout_text(const torch::Tensor& layout);

// What a CPU broadcast sends: `header` (describe_layout()) and room for `data`'s bytes, which
// only the root (`with_data`) fills in.
ACCEL_DECL torch::Tensor layout_then_bytes(const torch::Tensor& header, const torch::Tensor& data,
                                           bool with_data);

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/tensor_layout.ipp"
#endif
