// The safetensors format (https://github.com/huggingface/safetensors), its header only: an 8-byte
// little-endian length N, N bytes of JSON describing the tensors, then the tensors' bytes, which
// tile the rest of the file. No torch here, so that the fuzzer (tests/fuzz) builds in seconds;
// state/safetensors.hpp puts tensors on it.
//
// A file is untrusted input: parse_header checks every rule of the format before anything is
// read through it (docs/reference/safetensors.md lists them), and it is stricter than the reference in
// three places, each a file the reference writer never produces: a duplicate key (serde keeps
// one), a field other than dtype, shape and data_offsets in an entry (serde ignores it), and JSON
// whitespace other than the spaces the spec allows after the object.
//
// Longer than accel's headers should be because the format's rules are one list: the dtype
// table, the limits, each entry's checks and the strict parse (nlohmann's parser with a callback
// that refuses duplicate keys) are what "a valid header" means, and the fuzzer builds this file
// alone; the tensors' side is state/safetensors.hpp.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"

namespace accel::state::safetensors {

// The dtypes libtorch can hold (F8 from libtorch 2.1). The format has more (U16, U32, U64, F4,
// ...); a file that uses them is refused by name rather than read into the wrong type.
// clang-format off
enum class Dtype : std::uint8_t {
  F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2
};

namespace detail {
struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  std::size_t size;
  // The reference writer orders tensors by this (its Rust enum's order, by increasing alignment),
  // largest first, then by name: every tensor then starts at a multiple of its element size, and
  // our bytes equal the reference's.
  int reference_rank;
};
inline constexpr std::array<DtypeInfo, 12> dtype_table = {{
    {Dtype::F64, "F64", 8, 12},  {Dtype::F32, "F32", 4, 11},          {Dtype::F16, "F16", 2, 7},
    {Dtype::BF16, "BF16", 2, 8}, {Dtype::I64, "I64", 8, 13},          {Dtype::I32, "I32", 4, 9},
    {Dtype::I16, "I16", 2, 5},   {Dtype::I8, "I8", 1, 2},             {Dtype::U8, "U8", 1, 1},
    {Dtype::BOOL, "BOOL", 1, 0}, {Dtype::F8_E4M3, "F8_E4M3", 1, 4},
    {Dtype::F8_E5M2, "F8_E5M2", 1, 3},
}};
// clang-format on
constexpr const DtypeInfo& info(Dtype dtype) {
  return dtype_table[static_cast<std::size_t>(dtype)];
}
constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < dtype_table.size(); ++i)
    if (static_cast<std::size_t>(dtype_table[i].dtype) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "dtype_table must list the dtypes in Dtype's order");
}  // namespace detail

inline constexpr std::array<Dtype, 12> all_dtypes = {
    Dtype::F64, Dtype::F32, Dtype::F16, Dtype::BF16, Dtype::I64,     Dtype::I32,
    Dtype::I16, Dtype::I8,  Dtype::U8,  Dtype::BOOL, Dtype::F8_E4M3, Dtype::F8_E5M2};

constexpr std::string_view name(Dtype dtype) { return detail::info(dtype).name; }
constexpr std::size_t element_size(Dtype dtype) { return detail::info(dtype).size; }
constexpr int reference_rank(Dtype dtype) { return detail::info(dtype).reference_rank; }

constexpr std::optional<Dtype> parse_dtype(std::string_view text) {
  for (const auto& entry : detail::dtype_table)
    if (entry.name == text) return entry.dtype;
  return std::nullopt;
}

// One tensor of the header. Offsets are relative to the data section, which starts at 8 + N.
struct Entry {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;

  std::uint64_t bytes() const { return end - begin; }
  bool operator==(const Entry&) const = default;
};

struct Limits {
  // The format's own limit (the reference refuses larger headers): the JSON is parsed into
  // memory before anything else is known about the file.
  std::uint64_t max_header_bytes = 100'000'000;
};

struct Header {
  std::vector<Entry> entries;                   // sorted by begin: the order of the data
  std::map<std::string, std::string> metadata;  // __metadata__
  std::uint64_t header_bytes = 0;               // N: the JSON and its padding
  std::uint64_t data_bytes = 0;                 // the file after 8 + N
  std::vector<std::size_t> by_name;             // entries' indices sorted by name (for find)

  ACCEL_DECL const Entry* find(std::string_view name) const;
};

namespace detail {

using json = nlohmann::json;

inline constexpr std::string_view metadata_key = "__metadata__";
inline constexpr std::uint64_t max_dimension = std::numeric_limits<std::int64_t>::max();
// A header nests three levels (root, entry, shape); deeper input is hostile or broken, and is
// stopped before it costs memory.
inline constexpr int max_depth = 64;

// A name or value as JSON shows it (quoted, control characters escaped), cut to a readable size:
// a name is untrusted and may be megabytes long.
ACCEL_DECL std::string show_name(std::string_view text, std::size_t limit = 64);
ACCEL_DECL std::string shown(const json& value);
ACCEL_DECL std::string_view kind(const json& value);
ACCEL_DECL std::string dtype_names();
// A parser's message with any byte of the input that is not printable ASCII escaped.
ACCEL_DECL std::string printable(std::string_view text);

// numel x element size, or nullopt where it overflows 64 bits (a hostile shape).
ACCEL_DECL std::optional<std::uint64_t> byte_size(Dtype dtype, std::span<const std::int64_t> shape);

// One entry's own rules: non-negative dimensions, begin <= end, and end - begin = its bytes.
ACCEL_DECL void check_entry(const Entry& e, std::string_view context);

// The entries, sorted by offset, tile [0, data_bytes) exactly: no overlap, no hole, nothing after.
ACCEL_DECL void check_tiling(const std::vector<Entry>& sorted, std::uint64_t data_bytes,
                             std::string_view context);

ACCEL_DECL std::optional<std::uint64_t> as_unsigned(const json& value);

ACCEL_DECL Entry parse_entry(const std::string& tensor, const json& value,
                             std::string_view context);

// Sorts by offset (ties: empty tensors first, then by name, for one deterministic order) and
// builds the name index.
ACCEL_DECL void order(Header& header);

// JSON with every object's keys unique (nlohmann keeps the last duplicate silently) and nesting
// bounded. Used for the weights' index file too.
ACCEL_DECL json parse_json(std::string_view text, std::string_view context);

}  // namespace detail

// Checks every rule of the format on a whole file's bytes (`source` names it in errors) and
// returns its header. Nothing of the data is read.
ACCEL_DECL Header parse_header(std::span<const std::byte> file, std::string_view source,
                               Limits limits = {});

// The same from the file's first bytes alone (at least the 8-byte length and the header it
// gives, where the file has them) and its size: what a reader of slices needs, which reads the
// header first and then only the tensor bytes it wants.
ACCEL_DECL Header parse_header(std::span<const std::byte> head, std::uint64_t file_bytes,
                               std::string_view source, Limits limits = {});

// The 8-byte length and the JSON, as the reference writes them: `__metadata__` first (left out
// when empty), the entries in offset order, compact, padded with spaces so that the data starts
// at a multiple of 8. The entries must already be a valid layout (tiling [0, their end)).
ACCEL_DECL std::string serialize_header(const std::vector<Entry>& entries,
                                        const std::map<std::string, std::string>& metadata);

}  // namespace accel::state::safetensors

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/safetensors_format.ipp"
#endif
