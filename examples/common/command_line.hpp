// Command-line parsing shared by the example programs: the checked number readers, and the flags
// every example takes with the same meaning (the strategy, tracking, progress and checkpoints).
// Shared so that one flag is read, checked and refused with the same words in every example; each
// example keeps its own Args, its own flags and its own --help text.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include "common/variants.hpp"

namespace examples {

// A usage error: the examples end with status 2 and print their --help text after the message.
struct BadArgument : std::runtime_error { using std::runtime_error::runtime_error; };

template <class T>
std::string joined(const std::vector<T>& values) {
  std::string text;
  for (const T& value : values) text += fmt::format("{}{}", text.empty() ? "" : ", ", value);
  return text;
}

// `text` read whole as a number of type T from min to max: "10abc", " 5", "1e3" and "" are not
// numbers, and a value beyond T is out of range rather than wrapped or clamped.
template <class T>
T whole_number(std::string_view flag, std::string_view text, T min,
               T max = std::numeric_limits<T>::max()) {
  // from_chars takes no sign for an unsigned T: "-1" is then a number below the range, not junk.
  const bool minus = std::is_unsigned_v<T> && text.starts_with('-');
  const std::string_view digits = minus ? text.substr(1) : text;
  T value{};
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error == std::errc::invalid_argument || end != digits.data() + digits.size()) {
    const std::string range = max == std::numeric_limits<T>::max()
                                  ? fmt::format("at least {}", min)
                                  : fmt::format("from {} to {}", min, max);
    throw BadArgument(
        fmt::format("{} is '{}', not a whole number; it must be {}", flag, text, range));
  }
  const bool overflow = error == std::errc::result_out_of_range;
  if (minus || (overflow && text.starts_with('-')) || (!overflow && value < min))
    throw BadArgument(fmt::format("{} is {}; it must be at least {}", flag, text, min));
  if (overflow || value > max)
    throw BadArgument(fmt::format("{} is {}; it must be at most {}", flag, text, max));
  return value;
}

template <class T>
T one_of(std::string_view flag, T value, const std::vector<T>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end())
    throw BadArgument(fmt::format("{} is {}; it must be one of {}", flag, value, joined(allowed)));
  return value;
}

// An accumulation count this build compiled in. One that only -DACCEL_ALL_VARIANTS=ON compiles
// says so, rather than looking like a value no build accepts.
inline int accumulation(std::string_view flag, int value) {
  const auto compiled = accumulation_values();
  if (std::find(compiled.begin(), compiled.end(), value) != compiled.end()) return value;
  if (std::ranges::find(kAllVariantsAccumulations, value) != std::end(kAllVariantsAccumulations))
    throw BadArgument(fmt::format("{} is {}; this build compiled {} only: {} needs the whole "
                                  "policy matrix (configure with -DACCEL_ALL_VARIANTS=ON)",
                                  flag, value, joined(compiled), value));
  return one_of(flag, value, compiled);
}

// A finite number above 0 (or, with zero_ok, at least 0). `example` is a value the message
// suggests, one that suits the flag (a learning rate wants 1e-3 rather than 0.1).
inline double real_number(std::string_view flag, std::string_view text, std::string_view example,
                          bool zero_ok = false) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value) ||
      value < 0 || (value == 0 && !zero_ok))
    throw BadArgument(fmt::format("{} is '{}'; it must be a number {}, e.g. {} {}", flag, text,
                                  zero_ok ? "of at least 0" : "above 0", flag, example));
  return value;
}

// --log-with's value: accel's writers to log with, Accelerate's word, as a comma list of jsonl
// (metrics.jsonl), csv (metrics.csv) and tensorboard (TensorBoard's event file), or all. Each
// name once; none left empty.
inline std::vector<accel::tracking::Backend> log_with(std::string_view flag, std::string_view list) {
  using accel::tracking::Backend;
  if (list == "all") return {Backend::jsonl, Backend::csv, Backend::tensorboard};
  std::vector<Backend> backends;
  std::vector<std::string_view> seen;
  for (std::size_t begin = 0;;) {
    const std::size_t comma = std::min(list.find(',', begin), list.size());
    const std::string_view name = list.substr(begin, comma - begin);
    const auto backend = name == "jsonl" ? std::optional(Backend::jsonl)
                         : name == "csv" ? std::optional(Backend::csv)
                         : name == "tensorboard" ? std::optional(Backend::tensorboard)
                                                 : std::nullopt;
    if (!backend)
      throw BadArgument(fmt::format("{} is '{}': '{}' is not a tracker; name jsonl, csv or "
                                    "tensorboard, separated by commas, or all, e.g. {} "
                                    "jsonl,tensorboard",
                                    flag, list, name, flag));
    if (std::ranges::find(seen, name) != seen.end())
      throw BadArgument(fmt::format("{} is '{}': it names {} twice; name each tracker once", flag,
                                    list, name));
    seen.push_back(name);
    backends.push_back(*backend);
    if (comma == list.size()) return backends;
    begin = comma + 1;
  }
}

// The value after the flag argv[i], with i moved onto it. A value that starts with "--" is the
// next flag: this flag's value was left out.
inline std::string_view flag_value(int argc, char** argv, int& i) {
  if (i + 1 >= argc || std::string_view(argv[i + 1]).starts_with("--"))
    throw BadArgument(fmt::format("{} needs a value", argv[i]));
  return argv[++i];
}

// Reads `flag` into `args` when it is one of the flags every example takes; false for any other.
// `value` is a callable that returns the flag's value (flag_value). Args has the members these
// flags set, of the same types in every example: help, strategy, precision, accum, tracking,
// log_dir, run_name, log_with, log_every, progress, checkpoint_dir, checkpoint_every, async_checkpoint
// and resume.
template <class Args, class Value>
bool shared_flag(Args& args, std::string_view flag, Value&& value) {
  if (flag == "-h" || flag == "--help") args.help = true;
  else if (flag == "--strategy") args.strategy = one_of(flag, value(), strategy_flags());
  else if (flag == "--precision") args.precision = one_of(flag, value(), precision_flags());
  else if (flag == "--accum")
    args.accum = accumulation(flag, whole_number(flag, value(), 1));
  else if (flag == "--with-tracking") args.tracking = true;
  else if (flag == "--log-dir") args.tracking = true, args.log_dir = std::filesystem::path(value());
  else if (flag == "--run-name") args.tracking = true, args.run_name = value();
  else if (flag == "--log-with") args.tracking = true, args.log_with = log_with(flag, value());
  else if (flag == "--log-every") args.log_every = whole_number<std::int64_t>(flag, value(), 1);
  else if (flag == "--no-progress") args.progress = false;
  else if (flag == "--checkpoint-dir") args.checkpoint_dir = std::filesystem::path(value());
  else if (flag == "--checkpoint-every")
    args.checkpoint_every = whole_number<std::int64_t>(flag, value(), 1);
  else if (flag == "--async-checkpoint") args.async_checkpoint = true;
  else if (flag == "--resume") args.resume = true;
  else return false;
  return true;
}

// --resume, --checkpoint-every and --async-checkpoint need --checkpoint-dir; --help asks for
// nothing else, so with it nothing is checked.
template <class Args>
void check_checkpoint_flags(const Args& args) {
  if (args.help) return;
  if ((args.resume || args.checkpoint_every > 0 || args.async_checkpoint) && !args.checkpoint_dir)
    throw BadArgument(fmt::format("{} needs --checkpoint-dir DIR (where the checkpoints are)",
                                  args.resume                ? "--resume"
                                  : args.checkpoint_every > 0 ? "--checkpoint-every"
                                                              : "--async-checkpoint"));
}

}  // namespace examples
