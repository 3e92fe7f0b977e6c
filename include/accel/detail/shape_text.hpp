// A tensor's shape as accel's error messages print it: "4, 5" (inside the message's brackets) or,
// with separator "x", "4x5". Compiled once: fmt::join over a shape in a header instantiates
// fmt's integer formatting, which costs a translation unit more to compile than the code that
// prints the error (docs/dev/build-time.md).
#pragma once

#include <c10/util/ArrayRef.h>

#include <string>
#include <string_view>

#include "separate_compilation.hpp"

namespace accel::detail {

ACCEL_DECL std::string shape_text(c10::IntArrayRef sizes, std::string_view separator = ", ");

}  // namespace accel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/shape_text.ipp"
#endif
