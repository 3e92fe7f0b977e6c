// The little JSON accel writes by hand (config.json, run.json, metrics.jsonl, the Chrome trace):
// strings escaped per RFC 8259, numbers in their shortest round-trip form. Every string of
// every one of those files goes through string() below, so that each file is valid UTF-8 for
// strict readers (jq, Python's json, nlohmann's parser) whatever bytes a program passes: a
// Latin-1 file name, a byte-level model's sample. A sequence that is not UTF-8 becomes U+FFFD,
// one per maximal invalid subpart, as nlohmann-json's error_handler_t::replace does (it does
// the escaping, so the two cannot differ). NaN and infinities have no JSON spelling; they are
// written as null. The CSV file keeps them as nan / inf.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace accel::tracking::json {

inline std::string string(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

inline std::string number(double value) {
  return std::isfinite(value) ? fmt::format("{}", value) : std::string("null");
}
// `text`: the number as written elsewhere (fmt's shortest form, or an integer's digits), used
// when it is finite.
inline std::string number(double value, const std::string& text) {
  return std::isfinite(value) ? text : std::string("null");
}

}  // namespace accel::tracking::json
