// safetensors files of torch tensors: File reads one (the header checked by safetensors_format.hpp
// before any tensor is touched) and hands out copies of its tensors; serialize and write_file
// write one as the reference writer does, byte for byte (its tensor order: largest dtype first,
// then by name, so every tensor is aligned to its element size).
//
// The bytes on disk are little-endian and are copied as they lie in memory, hence the assertion.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "posix_file.hpp"
#include "safetensors_format.hpp"

// A preprocessor check rather than a static_assert: it cannot fire on the little-endian machines
// the compile-fail cases run on, so it is quoted in docs/concepts/policies.md without a case.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "accel: safetensors stores tensors little-endian and accel copies their bytes as they lie in memory; a big-endian host would need a byte swap per element"
#endif

namespace accel::state::safetensors {

// libtorch's dtype for a safetensors dtype; none for F8 before libtorch 2.1.
ACCEL_DECL std::optional<c10::ScalarType> to_scalar_type(Dtype dtype);

// The safetensors dtype of a torch dtype; none for those the format (or accel) lacks: complex,
// quantized, the unsigned 16-64 bit and the fnuz float8 types.
ACCEL_DECL std::optional<Dtype> to_dtype(c10::ScalarType type);

namespace detail {

// What serialize and write_file write: the header, then tensors[order[i]] in turn, which
// `entries` describe in the same order.
struct Plan {
  std::string header;
  std::vector<std::size_t> order;
  std::vector<Entry> entries;
  std::uint64_t data_bytes = 0;
};

ACCEL_DECL Plan plan(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                     const std::map<std::string, std::string>& metadata);

}  // namespace detail

class File {
 public:
  // The whole file, read into one buffer, and its header checked.
  ACCEL_DECL static File read(const std::filesystem::path& path, Limits limits = {});
  // Bytes already in memory; `source` names them in errors.
  ACCEL_DECL static File from_bytes(std::string bytes, std::string source, Limits limits = {});

  const Header& header() const { return header_; }
  const std::string& source() const { return source_; }
  std::span<const std::byte> bytes() const { return bytes_; }
  // One tensor's bytes, in place.
  std::span<const std::byte> data(const Entry& entry) const {
    return bytes_.subspan(8 + header_.header_bytes + entry.begin, entry.bytes());
  }

  // A new contiguous CPU tensor holding a copy of the named one.
  ACCEL_DECL torch::Tensor tensor(std::string_view name) const;
  ACCEL_DECL torch::Tensor tensor(const Entry& entry) const;
  // Every tensor, in the file's order.
  ACCEL_DECL std::vector<std::pair<std::string, torch::Tensor>> tensors() const;

 private:
  File(std::shared_ptr<const void> owner, std::span<const std::byte> bytes, std::string source,
       Limits limits)
      : owner_(std::move(owner)),
        bytes_(bytes),
        header_(parse_header(bytes, source, limits)),
        source_(std::move(source)) {}

  std::shared_ptr<const void> owner_;  // what bytes_ points into
  std::span<const std::byte> bytes_;
  Header header_;
  std::string source_;
};

// The whole file in memory: its size is known from the header, so the buffer is allocated once
// and each tensor's bytes are appended once (a non-contiguous or device tensor is copied
// straight into its place).
ACCEL_DECL std::string serialize(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                 const std::map<std::string, std::string>& metadata = {});

// Written straight from each tensor's memory after the header (no buffer of the whole file; a
// non-contiguous or device tensor is copied to a contiguous CPU one first, one at a time), then
// fsync'd and closed; a failure names the file and the system's reason, and removes the file.
// Not atomic by itself: save_weights (weights.hpp) writes to a temporary name and renames.
// `observe`, when given, sees every byte written, in order (a checkpoint hashes the file as it
// goes, without reading it back); returns the file's size.
ACCEL_DECL std::uint64_t write_file(
    const std::filesystem::path& path,
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata = {},
    const std::function<void(const void*, std::size_t)>& observe = {});

}  // namespace accel::state::safetensors

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/safetensors.ipp"
#endif
