// The safetensors header: parser, writer; safetensors_format.hpp includes it in header-only mode.
#pragma once

#include <fmt/ranges.h>

#include "../safetensors_format.hpp"

namespace accel::state::safetensors {

ACCEL_DECL const Entry* Header::find(std::string_view name) const {
  if (by_name.size() != entries.size()) {  // a Header built by hand
    for (const Entry& entry : entries)
      if (entry.name == name) return &entry;
    return nullptr;
  }
  const auto at =
      std::lower_bound(by_name.begin(), by_name.end(), name,
                       [&](std::size_t i, std::string_view n) { return entries[i].name < n; });
  return at != by_name.end() && entries[*at].name == name ? &entries[*at] : nullptr;
}

}  // namespace accel::state::safetensors

namespace accel::state::safetensors::detail {

ACCEL_DECL std::string show_name(std::string_view text, std::size_t limit) {
  const bool cut = text.size() > limit;
  std::string shown =
      json(std::string(text.substr(0, limit))).dump(-1, ' ', false, json::error_handler_t::replace);
  return cut ? shown + "..." : shown;
}

ACCEL_DECL std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 64 ? text.substr(0, 64) + "..." : text;
}

ACCEL_DECL std::string_view kind(const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a non-integer number";
    default:
      return "null";
  }
}

ACCEL_DECL std::string dtype_names() {
  std::vector<std::string_view> names;
  for (const Dtype dtype : all_dtypes) names.push_back(name(dtype));
  return fmt::format("{}", fmt::join(names, ", "));
}

ACCEL_DECL std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f)
      out += c;
    else
      out += fmt::format("\\x{:02x}", byte);
  }
  return out;
}

ACCEL_DECL std::optional<std::uint64_t> byte_size(Dtype dtype,
                                                  std::span<const std::int64_t> shape) {
  std::uint64_t size = element_size(dtype);
  for (const std::int64_t dim : shape)
    if (__builtin_mul_overflow(size, static_cast<std::uint64_t>(dim), &size)) return std::nullopt;
  return size;
}

ACCEL_DECL void check_entry(const Entry& e, std::string_view context) {
  for (std::size_t i = 0; i < e.shape.size(); ++i)
    if (e.shape[i] < 0)
      accel::detail::fail(
          "{}: tensor {}: shape dimension {} is {}; dimensions are integers from 0 to {}", context,
          show_name(e.name), i, e.shape[i], max_dimension);
  if (e.begin > e.end)
    accel::detail::fail(
        "{}: tensor {}: data_offsets [{}, {}] begin after they end; begin must be at most end",
        context, show_name(e.name), e.begin, e.end);
  const auto size = byte_size(e.dtype, e.shape);
  if (!size)
    accel::detail::fail(
        "{}: tensor {}: shape [{}] of {} has more than 2^64 bytes (the size overflows); no file "
        "can hold it",
        context, show_name(e.name), fmt::join(e.shape, ", "), name(e.dtype));
  if (*size != e.bytes())
    accel::detail::fail(
        "{}: tensor {}: shape [{}] of {} is {} bytes ({} per element), but data_offsets [{}, {}] "
        "span {} bytes; they must span exactly its size",
        context, show_name(e.name), fmt::join(e.shape, ", "), name(e.dtype), *size,
        element_size(e.dtype), e.begin, e.end, e.bytes());
}

ACCEL_DECL void check_tiling(const std::vector<Entry>& sorted, std::uint64_t data_bytes,
                             std::string_view context) {
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const Entry& e = sorted[i];
    if (e.begin < at)
      accel::detail::fail(
          "{}: tensor {} (data_offsets [{}, {}]) overlaps tensor {} (data_offsets [{}, {}]); each "
          "tensor must begin where the previous one ends",
          context, show_name(e.name), e.begin, e.end, show_name(sorted[i - 1].name),
          sorted[i - 1].begin, sorted[i - 1].end);
    if (e.begin > at && i == 0)
      accel::detail::fail(
          "{}: the first tensor {} begins at data offset {}, not 0: bytes [0, {}) belong to no "
          "tensor; the tensors must tile the data from offset 0",
          context, show_name(e.name), e.begin, e.begin);
    if (e.begin > at)
      accel::detail::fail(
          "{}: a hole: bytes [{}, {}) of the data belong to no tensor (tensor {} ends at {}, "
          "tensor {} begins at {}); each tensor must begin where the previous one ends",
          context, at, e.begin, show_name(sorted[i - 1].name), at, show_name(e.name), e.begin);
    at = e.end;
  }
  if (at > data_bytes)
    accel::detail::fail(
        "{}: tensor {} ends at data offset {}, past the end of the data ({} bytes); the file is "
        "truncated",
        context, show_name(sorted.back().name), at, data_bytes);
  if (at < data_bytes)
    accel::detail::fail(
        "{}: {} trailing bytes: the data is {} bytes but the tensors end at {}; the last tensor "
        "must end exactly at the end of the file",
        context, data_bytes - at, data_bytes, at);
}

ACCEL_DECL std::optional<std::uint64_t> as_unsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0)  // -0
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  return std::nullopt;
}

ACCEL_DECL Entry parse_entry(const std::string& tensor, const json& value,
                             std::string_view context) {
  const std::string who = show_name(tensor);
  constexpr std::string_view shape_rule = "an array of integers from 0 to 9223372036854775807";
  if (!value.is_object())
    accel::detail::fail(
        "{}: tensor {} is {} ({}); a tensor is an object with exactly \"dtype\", \"shape\" and "
        "\"data_offsets\"",
        context, who, kind(value), shown(value));
  for (const auto& [field, _] : value.items())
    if (field != "dtype" && field != "shape" && field != "data_offsets")
      accel::detail::fail(
          "{}: tensor {} has an unexpected field {}; a tensor has exactly \"dtype\", \"shape\" and "
          "\"data_offsets\"",
          context, who, show_name(field));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!value.contains(field))
      accel::detail::fail(
          "{}: tensor {} has no \"{}\"; a tensor has exactly \"dtype\", \"shape\" and "
          "\"data_offsets\"",
          context, who, field);
  Entry entry{tensor, Dtype::F32, {}, 0, 0};
  const json& dtype = value.at("dtype");
  const std::optional<Dtype> parsed =
      dtype.is_string() ? parse_dtype(dtype.get_ref<const std::string&>()) : std::nullopt;
  if (!parsed)
    accel::detail::fail("{}: tensor {}: unknown dtype {}; accel reads {}", context, who,
                        shown(dtype), dtype_names());
  entry.dtype = *parsed;
  const json& shape = value.at("shape");
  if (!shape.is_array())
    accel::detail::fail("{}: tensor {}: shape is {} ({}), not an array; it must be {}", context,
                        who, kind(shape), shown(shape), shape_rule);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto dim = as_unsigned(shape[i]);
    if (!dim || *dim > max_dimension)
      accel::detail::fail("{}: tensor {}: shape dimension {} is {}{}; shape must be {}", context,
                          who, i, shown(shape[i]),
                          shape[i].is_number_integer() && !dim ? " (negative)"
                          : !dim                               ? fmt::format(", {}", kind(shape[i]))
                                                               : " (too large)",
                          shape_rule);
    entry.shape.push_back(static_cast<std::int64_t>(*dim));
  }
  const json& offsets = value.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2)
    accel::detail::fail(
        "{}: tensor {}: data_offsets is {}; it must be [begin, end], two unsigned integers",
        context, who, shown(offsets));
  const auto begin = as_unsigned(offsets[0]), end = as_unsigned(offsets[1]);
  if (!begin || !end)
    accel::detail::fail(
        "{}: tensor {}: data_offsets {} are not unsigned integers; they must be [begin, end], two "
        "integers from 0 to 18446744073709551615",
        context, who, shown(offsets));
  entry.begin = *begin;
  entry.end = *end;
  check_entry(entry, context);
  return entry;
}

ACCEL_DECL void order(Header& header) {
  std::sort(header.entries.begin(), header.entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  header.by_name.resize(header.entries.size());
  for (std::size_t i = 0; i < header.by_name.size(); ++i) header.by_name[i] = i;
  std::sort(header.by_name.begin(), header.by_name.end(), [&](std::size_t a, std::size_t b) {
    return header.entries[a].name < header.entries[b].name;
  });
}

ACCEL_DECL json parse_json(std::string_view text, std::string_view context) {
  std::vector<std::set<std::string>> open;  // the keys seen in each object being parsed
  std::string tensor;                       // the top-level key being parsed, for messages
  const auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > max_depth)
      accel::detail::fail("{}: the JSON nests deeper than {} levels (a safetensors header nests 3)",
                          context, max_depth);
    if (event == json::parse_event_t::object_start) open.emplace_back();
    if (event == json::parse_event_t::object_end) open.pop_back();
    if (event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open.back().insert(key).second) {
        if (depth == 1)
          accel::detail::fail(
              "{}: key {} appears twice; each tensor name (and __metadata__) must appear once",
              context, show_name(key));
        accel::detail::fail(
            "{}: key {} appears twice in the object of {}; each key must appear once", context,
            show_name(key), show_name(tensor));
      }
      if (depth == 1) tensor = key;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& error) {  // parse_error, and out_of_range for 1e400 (fuzzer)
    const std::string_view what = error.what();
    const auto* parse_error = dynamic_cast<const json::parse_error*>(&error);
    if (parse_error && what.ends_with("expected end of input"))
      accel::detail::fail(
          "{}: unexpected byte {:#04x} after the JSON object, at byte {} of the header; only "
          "spaces (0x20) may follow it",
          context,
          static_cast<unsigned char>(text[std::min(parse_error->byte - 1, text.size() - 1)]),
          parse_error->byte - 1);
    const auto at = std::min(what.find("parse error"), what.find("number overflow"));
    accel::detail::fail("{}: the header is not valid JSON: {}", context,
                        printable(what.substr(at == std::string_view::npos ? 0 : at)));
  }
}

}  // namespace accel::state::safetensors::detail

namespace accel::state::safetensors {

ACCEL_DECL Header parse_header(std::span<const std::byte> file, std::string_view source,
                               Limits limits) {
  return parse_header(file, file.size(), source, limits);
}

ACCEL_DECL Header parse_header(std::span<const std::byte> file, std::uint64_t file_bytes,
                               std::string_view source, Limits limits) {
  using detail::json;
  const std::string context = fmt::format("'{}' is not a valid safetensors file", source);
  if (file_bytes < 8 || file.size() < 8)
    accel::detail::fail(
        "{}: it is {} bytes, too short: a safetensors file begins with an 8-byte header length",
        context, file_bytes);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = n << 8 | static_cast<std::uint8_t>(file[static_cast<std::size_t>(i)]);
  if (n > limits.max_header_bytes)
    accel::detail::fail(
        "{}: its header length N = {} is over the limit of {} bytes (Limits::max_header_bytes; the "
        "format allows 100000000)",
        context, n, limits.max_header_bytes);
  if (n > file_bytes - 8)
    accel::detail::fail(
        "{}: its header length N = {} runs past the end of the file ({} bytes, so N can be at most "
        "{}); the file is truncated or not safetensors",
        context, n, file_bytes, file_bytes - 8);
  // The caller's part, not the file's: the header would be read past the bytes given.
  if (n > file.size() - 8)
    accel::detail::fail(
        "parse_header('{}'): the header length N = {} needs the file's first {} bytes, and only {} "
        "were given; pass at least the 8-byte length and the header it gives",
        source, n, 8 + n, file.size());
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, n);
  if (text.empty() || text.front() != '{')
    accel::detail::fail(
        "{}: its header {}; the header is a JSON object and must begin with '{{' (0x7B)", context,
        text.empty()
            ? std::string("is empty (N = 0)")
            : fmt::format("begins with byte {:#04x}", static_cast<unsigned char>(text.front())));
  // Padding: the spec allows trailing spaces, and nothing else, after the object.
  const std::size_t last = text.find_last_not_of(' ');
  const json root = detail::parse_json(text.substr(0, last + 1), context);
  if (text[last] != '}')  // the JSON parsed, so this is whitespace other than a space
    accel::detail::fail(
        "{}: unexpected byte {:#04x} after the JSON object, at byte {} of the header; only spaces "
        "(0x20) may follow it",
        context, static_cast<unsigned char>(text[text.find_last_of('}') + 1]),
        text.find_last_of('}') + 1);
  if (!root.is_object())
    accel::detail::fail("{}: the header is {}, not a JSON object", context, detail::kind(root));

  Header header;
  header.header_bytes = n;
  header.data_bytes = file_bytes - 8 - n;
  for (const auto& [key, value] : root.items()) {
    if (key != detail::metadata_key) {
      header.entries.push_back(detail::parse_entry(key, value, context));
      continue;
    }
    if (!value.is_object())
      accel::detail::fail("{}: __metadata__ is {} ({}); it must be an object of string values",
                          context, detail::kind(value), detail::shown(value));
    for (const auto& [field, text_value] : value.items()) {
      if (!text_value.is_string())
        accel::detail::fail("{}: __metadata__ {} is {} ({}); metadata values must be strings",
                            context, detail::show_name(field), detail::kind(text_value),
                            detail::shown(text_value));
      header.metadata.emplace(field, text_value.get<std::string>());
    }
  }
  detail::order(header);
  if (header.entries.empty() && header.data_bytes > 0)
    accel::detail::fail(
        "{}: {} trailing bytes: the header names no tensor, so nothing may follow it", context,
        header.data_bytes);
  detail::check_tiling(header.entries, header.data_bytes, context);
  return header;
}

ACCEL_DECL std::string serialize_header(const std::vector<Entry>& entries,
                                        const std::map<std::string, std::string>& metadata) {
  using detail::json;
  constexpr std::string_view context = "cannot write a safetensors header";
  std::vector<Entry> sorted = entries;
  std::sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::set<std::string_view> names;
  for (const Entry& entry : sorted) {
    if (entry.name == detail::metadata_key)
      accel::detail::fail("{}: a tensor may not be named __metadata__, the format's metadata key",
                          context);
    if (!names.insert(entry.name).second)
      accel::detail::fail("{}: two tensors are named {}; names must be unique", context,
                          detail::show_name(entry.name));
    detail::check_entry(entry, context);
  }
  detail::check_tiling(sorted, sorted.empty() ? 0 : sorted.back().end, context);

  // A JSON string; a name that is not UTF-8 cannot be one.
  const auto string = [&](const std::string& text) {
    try {
      return json(text).dump();
    } catch (const json::type_error&) {
      accel::detail::fail("{}: {} is not valid UTF-8, which a JSON header requires", context,
                          detail::show_name(text));
    }
  };
  std::string out(8, '\0');
  out += '{';
  if (!metadata.empty()) {
    out += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it)
      out += (it == metadata.begin() ? "" : ",") + string(it->first) + ":" + string(it->second);
    out += '}';
  }
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const Entry& e = sorted[i];
    out += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                       i == 0 && metadata.empty() ? "" : ",", string(e.name), name(e.dtype),
                       fmt::join(e.shape, ","), e.begin, e.end);
  }
  out += '}';
  out.append((8 - out.size() % 8) % 8, ' ');
  const std::uint64_t n = out.size() - 8;
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i) & 0xff);
  return out;
}

}  // namespace accel::state::safetensors
