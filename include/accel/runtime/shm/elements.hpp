// The element types the shared-memory transport reduces, and the loops that reduce them. Half
// types (bf16, fp16) are read into float, reduced in float and rounded once at the end, as
// Gloo's fp32 wire does; every element is summed in rank order 0, 1, ..., N-1 on every rank.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "../../detail/separate_compilation.hpp"

namespace accel::runtime::shm {

enum class DataType : std::uint8_t { f32, f64, bf16, f16, i64, i32, u8 };
enum class Reduction : std::uint8_t { sum, mean, max, min };

inline std::size_t element_size(DataType type) {
  switch (type) {
    case DataType::f64:
    case DataType::i64: return 8;
    case DataType::f32:
    case DataType::i32: return 4;
    case DataType::bf16:
    case DataType::f16: return 2;
    default: return 1;
  }
}

inline std::string_view to_string(DataType type) {
  switch (type) {
    case DataType::f32: return "float32";
    case DataType::f64: return "float64";
    case DataType::bf16: return "bfloat16";
    case DataType::f16: return "float16";
    case DataType::i64: return "int64";
    case DataType::i32: return "int32";
    default: return "uint8";
  }
}

// fp16 through the compiler's _Float16 (g++ >= 12 on x86-64 and aarch64): exact IEEE
// conversions. Without it, fp16 tensors take the Gloo path.
#if defined(__FLT16_MANT_DIG__)
inline constexpr bool has_f16 = true;
#else
inline constexpr bool has_f16 = false;
#endif

namespace elements {

struct Bf16 {
  std::uint16_t bits;
};
inline float to_float(Bf16 v) { return std::bit_cast<float>(std::uint32_t{v.bits} << 16); }
// Round to nearest even, NaN kept a (quiet) NaN: what c10::BFloat16 does.
inline Bf16 to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if (f != f) return {static_cast<std::uint16_t>((u >> 16) | 0x40)};
  const std::uint32_t bias = 0x7fff + ((u >> 16) & 1);
  return {static_cast<std::uint16_t>((u + bias) >> 16)};
}

template <class T>
struct Accumulator {
  using type = T;
};
template <>
struct Accumulator<Bf16> {
  using type = float;
};
#if defined(__FLT16_MANT_DIG__)
template <>
struct Accumulator<_Float16> {
  using type = float;
};
#endif

template <class T>
typename Accumulator<T>::type widen(T v) {
  if constexpr (std::is_same_v<T, Bf16>)
    return to_float(v);
  else
    return static_cast<typename Accumulator<T>::type>(v);
}
template <class T>
T narrow(typename Accumulator<T>::type v) {
  if constexpr (std::is_same_v<T, Bf16>)
    return to_bf16(v);
  else
    return static_cast<T>(v);
}

// The sum (or the mean) of `Ranks` inputs times `scale`, element by element, written into one
// output or into every input: each element's inputs are read before its outputs are written,
// so an output may be an input. With the rank count known at compile time the sum stays in a
// register and the loop streams each input and output once, where the blocked loop of reduce()
// below makes several passes over its accumulators (docs/concepts/performance.md, "Shared memory between
// the ranks of one node").
template <class T, int Ranks>
void sum_in_one_pass(const std::byte* const* inputs, std::byte* const* outputs, bool into_inputs,
                     std::size_t count, bool mean, double scale) {
  using A = typename Accumulator<T>::type;
  const T* source[Ranks];
  for (int r = 0; r < Ranks; ++r) source[r] = reinterpret_cast<const T*>(inputs[r]);
  const A factor = static_cast<A>(scale);
  const auto stream = [&]<int Outputs>(std::integral_constant<int, Outputs>) {
    T* target[Outputs];
    for (int o = 0; o < Outputs; ++o) target[o] = reinterpret_cast<T*>(outputs[o]);
    for (std::size_t i = 0; i < count; ++i) {
      A v = widen(source[0][i]);
      for (int r = 1; r < Ranks; ++r) v += widen(source[r][i]);
      if (mean) v /= static_cast<A>(Ranks);
      const T result = narrow<T>(v * factor);
      for (int o = 0; o < Outputs; ++o) target[o][i] = result;
    }
  };
  if (into_inputs)
    stream(std::integral_constant<int, Ranks>{});
  else
    stream(std::integral_constant<int, 1>{});
}

// outputs[o][i] = (reduction over r of inputs[r][i], in rank order) x scale, for i in [0, count)
// and each of the `output_count` outputs; the scale multiplies the accumulator, before the
// rounding to a half type. An output may be an input: each block is read in full before any
// of it is written.
template <class T>
void reduce(const std::byte* const* inputs, int ranks, std::byte* const* outputs,
            int output_count, std::size_t count, Reduction op, double scale) {
  using A = typename Accumulator<T>::type;
  const T* const* in = reinterpret_cast<const T* const*>(inputs);
  // Blocks of a few KiB: the accumulators stay in L1 while each rank's block streams past.
  constexpr std::size_t block = 1024;
  A acc[block];
  for (std::size_t begin = 0; begin < count; begin += block) {
    const std::size_t n = std::min(block, count - begin);
    for (std::size_t i = 0; i < n; ++i) acc[i] = widen(in[0][begin + i]);
    for (int r = 1; r < ranks; ++r) {
      const T* source = in[r] + begin;
      switch (op) {
        case Reduction::max:
          for (std::size_t i = 0; i < n; ++i) {
            const A v = widen(source[i]);
            acc[i] = (v > acc[i] || v != v) ? v : acc[i];  // NaN wins, as in torch.max
          }
          break;
        case Reduction::min:
          for (std::size_t i = 0; i < n; ++i) {
            const A v = widen(source[i]);
            acc[i] = (v < acc[i] || v != v) ? v : acc[i];
          }
          break;
        default:
          for (std::size_t i = 0; i < n; ++i) acc[i] += widen(source[i]);
      }
    }
    if (op == Reduction::mean)
      for (std::size_t i = 0; i < n; ++i) acc[i] /= static_cast<A>(ranks);
    if (scale != 1.0)
      for (std::size_t i = 0; i < n; ++i) acc[i] *= static_cast<A>(scale);
    for (int o = 0; o < output_count; ++o) {
      T* result = reinterpret_cast<T*>(outputs[o]) + begin;
      for (std::size_t i = 0; i < n; ++i) result[i] = narrow<T>(acc[i]);
    }
  }
}

// sum_in_one_pass where it applies (a floating type, a sum or a mean, 2 to 4 ranks, one
// output or every input as output); false where the caller should use reduce().
template <class T>
bool reduce_in_one_pass(const std::byte* const* inputs, int ranks, std::byte* const* outputs,
                        bool into_inputs, std::size_t count, Reduction op, double scale) {
  if constexpr (std::is_integral_v<T>) {
    return false;
  } else {
    if (op != Reduction::sum && op != Reduction::mean) return false;
    const bool mean = op == Reduction::mean;
    switch (ranks) {
      case 2: sum_in_one_pass<T, 2>(inputs, outputs, into_inputs, count, mean, scale); return true;
      case 3: sum_in_one_pass<T, 3>(inputs, outputs, into_inputs, count, mean, scale); return true;
      case 4: sum_in_one_pass<T, 4>(inputs, outputs, into_inputs, count, mean, scale); return true;
      default: return false;
    }
  }
}

}  // namespace elements

ACCEL_DECL void reduce(DataType type, const std::byte* const* inputs, int ranks, std::byte* out,
                       std::size_t count, Reduction op);
// The sum times `scale`, written into each of `output_count` outputs (elements::reduce).
ACCEL_DECL void sum_into_each(DataType type, const std::byte* const* inputs, int ranks,
                              std::byte* const* outputs, int output_count, std::size_t count,
                              double scale);

}  // namespace accel::runtime::shm

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/elements.ipp"
#endif
