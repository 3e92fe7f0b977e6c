// The two float8 formats of Fp8's recipe (TransformerEngine's HYBRID: e4m3 forward, e5m2 for
// gradients) and rounding an fp32 tensor to them, as fp32 values (quantize-dequantize):
//
//   format  mantissa bits  smallest normal  smallest subnormal  largest  inf  relative step
//   e4m3    3              2^-6             2^-9                448      no   2^-4 at most
//   e5m2    2              2^-14            2^-16               57344    yes  2^-3 at most
//
// Rounding is to nearest, ties to even, and saturating, as TransformerEngine's casts
// (__NV_SATFINITE): a finite value beyond the largest, and an infinity, become the largest of its
// sign; nan stays nan; -0 stays -0. Where libtorch has the float8 dtypes (2.1 on) the rounding
// goes through them (clamped first, since libtorch's own cast does not saturate: e4m3 turns
// values from 480 on into nan); elsewhere it is emulated with fp32 operations that give the same
// bits (tested against the dtypes on libtorch 2.6).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string_view>

#include "../detail/error.hpp"
#include "../detail/torch_compat.hpp"

namespace accel::precision {

enum class Float8Format { e4m3, e5m2 };

struct Float8Spec {
  std::string_view name;
  int mantissa_bits;
  int min_normal_exponent;  // the smallest normal value is 2^this
  float max;                // the largest finite value
};

constexpr Float8Spec spec_of(Float8Format format) {
  return format == Float8Format::e4m3 ? Float8Spec{"e4m3", 3, -6, 448.0f}
                                      : Float8Spec{"e5m2", 2, -14, 57344.0f};
}

// Rounds with fp32 operations only: the value's quantum (2^(exponent - mantissa bits), the
// exponent no lower than the smallest normal's, which gives the subnormals their fixed step) times
// the quotient rounded half to even. Division and product by a power of two are exact.
inline torch::Tensor round_to_float8_emulated(const torch::Tensor& x, Float8Format format) {
  const Float8Spec spec = spec_of(format);
  const torch::Tensor clamped = x.to(torch::kFloat).clamp(-spec.max, spec.max);
  const torch::Tensor magnitude = clamped.abs();
  const torch::Tensor exponent =
      (std::get<1>(torch::frexp(magnitude)) - 1).clamp_min(spec.min_normal_exponent);
  const torch::Tensor quantum = torch::exp2((exponent - spec.mantissa_bits).to(torch::kFloat));
  return torch::copysign(torch::round(magnitude / quantum) * quantum, clamped);
}

// libtorch's dtype of `format` (Float8_e4m3fn, Float8_e5m2), where it has one (2.1 and newer).
inline std::optional<c10::ScalarType> float8_dtype_of(Float8Format format) {
  return format == Float8Format::e4m3 ? detail::float8_e4m3_dtype : detail::float8_e5m2_dtype;
}

// Through the real dtype (libtorch 2.1 and newer).
inline torch::Tensor round_to_float8_native(const torch::Tensor& x, Float8Format format) {
  const auto dtype = float8_dtype_of(format);
  if (!dtype) detail::fail("float8 dtypes need libtorch 2.1 or newer, and this is libtorch {}",
                           TORCH_VERSION);
  const Float8Spec spec = spec_of(format);
  return x.to(torch::kFloat).clamp(-spec.max, spec.max).to(*dtype).to(torch::kFloat);
}

// x rounded to `format`, in fp32: through the dtype where libtorch has it, emulated elsewhere.
inline torch::Tensor round_to_float8(const torch::Tensor& x, Float8Format format) {
  return detail::has_float8 ? round_to_float8_native(x, format)
                            : round_to_float8_emulated(x, format);
}

}  // namespace accel::precision
