// What a run records (values.hpp): the values written as text. values.hpp includes it in
// header-only mode, impl/src.hpp in the separately compiled one.
#include <fmt/format.h>

#include "../../detail/error.hpp"
#include "../../detail/shape_text.hpp"
#include "../../detail/json.hpp"
#include "../values.hpp"

namespace accel::tracking {

ACCEL_DECL std::string ConfigValue::to_json() const {
  return std::visit(
      [](const auto& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>)
          return v ? "true" : "false";
        else if constexpr (std::is_same_v<V, std::int64_t>)
          return fmt::format("{}", v);
        else if constexpr (std::is_same_v<V, double>)
          return json::number(v);
        else
          return json::string(v);
      },
      value_);
}

ACCEL_DECL std::string config_json(const Config& config) {
  std::string text = "{";
  for (const auto& [key, value] : config)
    text += fmt::format("{}\n  {}: {}", text.size() > 1 ? "," : "", json::string(key),
                        value.to_json());
  return text + (config.empty() ? "}\n" : "\n}\n");
}

ACCEL_DECL std::string Number::text() const {
  if (integer) return fmt::format("{}", *integer);
  return single ? fmt::format("{}", static_cast<float>(value)) : fmt::format("{}", value);
}

ACCEL_DECL Number Metric::number(std::string_view name) const {
  if (!tensor_.defined()) return {value_, single_, integer_};
  if (tensor_.numel() != 1)
    detail::fail("log(): metric '{}' is a tensor of shape [{}] ({} elements); log one number per "
                 "name, e.g. {{\"{}\", t.mean()}}",
                 name, detail::shape_text(tensor_.sizes()), tensor_.numel(), name);
  if (c10::isIntegralType(tensor_.scalar_type(), /*includeBool=*/true)) {
    const auto exact = tensor_.item<std::int64_t>();
    return {static_cast<double>(exact), false, exact};
  }
  const torch::ScalarType type = tensor_.scalar_type();
  return {tensor_.item<double>(),
          type == torch::kFloat || type == torch::kBFloat16 || type == torch::kHalf,
          std::nullopt};
}

}  // namespace accel::tracking
