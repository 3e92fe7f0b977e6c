// The little JSON the trackers write: strings escaped per RFC 8259, numbers in their shortest
// round-trip form. NaN and infinities have no JSON spelling; they are written as null so that
// every line stays valid JSON for strict readers (jq, Python's json with parse_constant unset,
// pandas). The CSV file keeps them as nan / inf.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>

namespace accel::tracking::json {

inline std::string string(std::string_view text) {
  std::string quoted = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': quoted += "\\\""; break;
      case '\\': quoted += "\\\\"; break;
      case '\n': quoted += "\\n"; break;
      case '\r': quoted += "\\r"; break;
      case '\t': quoted += "\\t"; break;
      case '\b': quoted += "\\b"; break;
      case '\f': quoted += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          quoted += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          quoted += c;
    }
  }
  return quoted + "\"";
}

inline std::string number(double value) {
  return std::isfinite(value) ? fmt::format("{}", value) : std::string("null");
}
// `text`: the number as written elsewhere (fmt's shortest form), used when it is finite.
inline std::string number(double value, const std::string& text) {
  return std::isfinite(value) ? text : std::string("null");
}

}  // namespace accel::tracking::json
