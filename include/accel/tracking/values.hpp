// What a run records: its configuration (hyperparameters: numbers, strings, flags) and, at each
// step, named numbers (metrics). Both are ordered lists of (name, value), written in the order
// given, so that
//   accelerator.init_trackers("fashion_mnist", {{"lr", 1e-3}, {"batch_size", 64}, {"strategy", "ddp"}});
//   accelerator.log({{"loss", loss}, {"lr", lr}}, step);
// read as they do in Accelerate. A metric may be any arithmetic value or a one-element tensor;
// log_text() takes (name, text) pairs. An integer (an integral value, an integer or bool tensor)
// that fits std::int64_t is kept as one, not rounded through a double: 2^53 + 1 is written
// 9007199254740993.
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "../detail/separate_compilation.hpp"

namespace accel::tracking {

// `value` as a std::int64_t, or nothing when it does not fit (an unsigned value above
// INT64_MAX, which the caller keeps as a double).
template <std::integral T>
constexpr std::optional<std::int64_t> exact_integer(T value) {
  if constexpr (std::is_unsigned_v<T>)
    if (static_cast<std::uint64_t>(value) >
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return std::nullopt;
  return static_cast<std::int64_t>(value);
}

// One configuration value. Constructors rather than a bare std::variant, so that a string
// literal is a string (not a bool) and any integer or floating type is accepted. An integer is
// kept exactly (an unsigned one above INT64_MAX as a double).
class ConfigValue {
 public:
  ConfigValue(bool value) : value_(value) {}  // NOLINT: implicit, for brace lists
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  ConfigValue(T value) {  // NOLINT
    if (const auto exact = exact_integer(value))
      value_ = *exact;
    else
      value_ = static_cast<double>(value);
  }
  template <std::floating_point T>
  ConfigValue(T value) : value_(static_cast<double>(value)) {}  // NOLINT
  ConfigValue(const char* value) : value_(std::string(value)) {}  // NOLINT
  ConfigValue(std::string value) : value_(std::move(value)) {}  // NOLINT
  ConfigValue(std::string_view value) : value_(std::string(value)) {}  // NOLINT

  const std::variant<bool, std::int64_t, double, std::string>& value() const { return value_; }

  // The value as JSON: true/false, a number, or a quoted string.
  ACCEL_DECL std::string to_json() const;

 private:
  std::variant<bool, std::int64_t, double, std::string> value_;
};

// A metric's number, and whether it came from a float (a float32 tensor or a float): such a
// number is written with the digits a float needs (0.64895701, not 0.6489570140838623).
struct Number {
  double value = 0.0;  // for an integer, the nearest double (exact up to 2^53)
  bool single = false;
  // Set for an integer that fits std::int64_t: its exact value, which the files write.
  std::optional<std::int64_t> integer = std::nullopt;
  // The number as written: an integer's digits, else the shortest round-trip form, a float's
  // digits when `single`.
  ACCEL_DECL std::string text() const;
};

// One metric value: a number. A tensor must hold exactly one element (a loss, an accuracy); its
// value is read with item(), which waits for the device.
class Metric {
 public:
  template <class T>
    requires std::integral<T> || std::floating_point<T>
  Metric(T value)  // NOLINT: implicit, for brace lists
      : value_(static_cast<double>(value)), single_(std::is_same_v<T, float>) {
    if constexpr (std::integral<T>) integer_ = exact_integer(value);
  }
  Metric(const torch::Tensor& value) : tensor_(value) {}  // NOLINT

  // The number, or an accel::Error naming `name` when a tensor is not one element.
  double value(std::string_view name) const { return number(name).value; }
  ACCEL_DECL Number number(std::string_view name) const;

 private:
  double value_ = 0.0;
  bool single_ = false;
  std::optional<std::int64_t> integer_;
  torch::Tensor tensor_;
};

using Config = std::vector<std::pair<std::string, ConfigValue>>;
using Metrics = std::vector<std::pair<std::string, Metric>>;

// What each tracker receives: log()'s metrics read as numbers (every tensor read once, whatever
// the number of trackers), and log_text()'s values as they were given.
using Scalars = std::vector<std::pair<std::string, Number>>;
using Texts = std::vector<std::pair<std::string, std::string>>;

// `config` as config.json holds it: one JSON object, a key per line in the order given (also
// the text TensorBoard's event file holds as "config").
ACCEL_DECL std::string config_json(const Config& config);

}  // namespace accel::tracking

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/values.ipp"
#endif
