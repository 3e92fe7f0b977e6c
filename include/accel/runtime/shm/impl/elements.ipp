// The reduction's dispatch over element types; elements.hpp includes it in header-only mode.
#pragma once

#include "../elements.hpp"

namespace accel::runtime::shm {

namespace elements {
// Calls `call` with a value of the element type `type` names.
template <class Call>
void for_type(DataType type, Call&& call) {
  switch (type) {
    case DataType::f32: return call(float{});
    case DataType::f64: return call(double{});
    case DataType::bf16: return call(elements::Bf16{});
#if defined(__FLT16_MANT_DIG__)
    case DataType::f16: return call(_Float16{});
#endif
    case DataType::i64: return call(std::int64_t{});
    case DataType::i32: return call(std::int32_t{});
    default: return call(std::uint8_t{});
  }
}

// The one-pass loop where it applies (one output, or every input as its own output), the
// blocked loop otherwise: the one choice both entry points below make.
template <class T>
void reduce_fastest(const std::byte* const* inputs, int ranks, std::byte* const* outputs,
                    int output_count, std::size_t count, Reduction op, double scale) {
  const bool into_inputs =
      output_count == ranks && std::equal(outputs, outputs + ranks, inputs);
  if ((output_count == 1 || into_inputs) &&
      reduce_in_one_pass<T>(inputs, ranks, outputs, into_inputs, count, op, scale))
    return;
  reduce<T>(inputs, ranks, outputs, output_count, count, op, scale);
}

}  // namespace elements

ACCEL_DECL void reduce(DataType type, const std::byte* const* inputs, int ranks, std::byte* out,
                       std::size_t count, Reduction op) {
  elements::for_type(type, [&]<class T>(T) {
    elements::reduce_fastest<T>(inputs, ranks, &out, 1, count, op, 1.0);
  });
}

ACCEL_DECL void sum_into_each(DataType type, const std::byte* const* inputs, int ranks,
                              std::byte* const* outputs, int output_count, std::size_t count,
                              double scale) {
  elements::for_type(type, [&]<class T>(T) {
    elements::reduce_fastest<T>(inputs, ranks, outputs, output_count, count, Reduction::sum,
                                scale);
  });
}

}  // namespace accel::runtime::shm
