// The reduction's dispatch over element types; elements.hpp includes it in header-only mode.
#pragma once

#include "../elements.hpp"

namespace accel::runtime::shm {

ACCEL_DECL void reduce(DataType type, const std::byte* const* inputs, int ranks, std::byte* out,
                       std::size_t count, Reduction op) {
  switch (type) {
    case DataType::f32: return elements::reduce<float>(inputs, ranks, out, count, op);
    case DataType::f64: return elements::reduce<double>(inputs, ranks, out, count, op);
    case DataType::bf16: return elements::reduce<elements::Bf16>(inputs, ranks, out, count, op);
#if defined(__FLT16_MANT_DIG__)
    case DataType::f16: return elements::reduce<_Float16>(inputs, ranks, out, count, op);
#endif
    case DataType::i64: return elements::reduce<std::int64_t>(inputs, ranks, out, count, op);
    case DataType::i32: return elements::reduce<std::int32_t>(inputs, ranks, out, count, op);
    default: return elements::reduce<std::uint8_t>(inputs, ranks, out, count, op);
  }
}

}  // namespace accel::runtime::shm
