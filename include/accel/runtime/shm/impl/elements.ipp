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
}  // namespace elements

ACCEL_DECL void reduce(DataType type, const std::byte* const* inputs, int ranks, std::byte* out,
                       std::size_t count, Reduction op) {
  elements::for_type(type, [&]<class T>(T) {
    if (!elements::reduce_in_one_pass<T>(inputs, ranks, &out, false, count, op, 1.0))
      elements::reduce<T>(inputs, ranks, &out, 1, count, op, 1.0);
  });
}

ACCEL_DECL void sum_into_each(DataType type, const std::byte* const* inputs, int ranks,
                              std::byte* const* outputs, int output_count, std::size_t count,
                              double scale) {
  const bool into_inputs =
      output_count == ranks && std::equal(outputs, outputs + ranks, inputs);
  elements::for_type(type, [&]<class T>(T) {
    if ((output_count == 1 || into_inputs) &&
        elements::reduce_in_one_pass<T>(inputs, ranks, outputs, into_inputs, count,
                                        Reduction::sum, scale))
      return;
    elements::reduce<T>(inputs, ranks, outputs, output_count, count, Reduction::sum, scale);
  });
}

}  // namespace accel::runtime::shm
