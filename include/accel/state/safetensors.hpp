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
#include "../detail/torch_compat.hpp"
#include "posix_file.hpp"
#include "safetensors_format.hpp"

// A preprocessor check rather than a static_assert: it cannot fire on the little-endian machines
// the compile-fail cases run on, so it is quoted in docs/policies.md without a case.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "accel: safetensors stores tensors little-endian and accel copies their bytes as they lie in memory; a big-endian host would need a byte swap per element"
#endif

namespace accel::state::safetensors {

// libtorch's dtype for a safetensors dtype; none for F8 before libtorch 2.1.
inline std::optional<c10::ScalarType> to_scalar_type(Dtype dtype) {
  // clang-format off
  switch (dtype) {
    case Dtype::F64: return c10::ScalarType::Double;
    case Dtype::F32: return c10::ScalarType::Float;
    case Dtype::F16: return c10::ScalarType::Half;
    case Dtype::BF16: return c10::ScalarType::BFloat16;
    case Dtype::I64: return c10::ScalarType::Long;
    case Dtype::I32: return c10::ScalarType::Int;
    case Dtype::I16: return c10::ScalarType::Short;
    case Dtype::I8: return c10::ScalarType::Char;
    case Dtype::U8: return c10::ScalarType::Byte;
    case Dtype::BOOL: return c10::ScalarType::Bool;
    case Dtype::F8_E4M3: return accel::detail::float8_e4m3_dtype;  // e4m3fn, as the format means
    case Dtype::F8_E5M2: return accel::detail::float8_e5m2_dtype;
  }
  // clang-format on
  return std::nullopt;
}

// The safetensors dtype of a torch dtype; none for those the format (or accel) lacks: complex,
// quantized, the unsigned 16-64 bit and the fnuz float8 types.
inline std::optional<Dtype> to_dtype(c10::ScalarType type) {
  for (const Dtype dtype : all_dtypes)
    if (to_scalar_type(dtype) == type) return dtype;
  return std::nullopt;
}

namespace detail {

// What serialize and write_file write: the header, then tensors[order[i]] in turn, which
// `entries` describe in the same order.
struct Plan {
  std::string header;
  std::vector<std::size_t> order;
  std::vector<Entry> entries;
  std::uint64_t data_bytes = 0;
};

inline Plan plan(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  Plan p;
  std::set<std::string_view> names;
  std::vector<Dtype> dtypes;
  for (const auto& [name, tensor] : tensors) {
    if (!names.insert(name).second)
      accel::detail::fail(
          "cannot write safetensors: two tensors are named {}; names must be unique",
          show_name(name));
    if (!tensor.defined())
      accel::detail::fail("cannot write safetensors: tensor {} is undefined", show_name(name));
    if (tensor.layout() != c10::kStrided || tensor.is_quantized())
      accel::detail::fail(
          "cannot write safetensors: tensor {} is {}; safetensors holds dense tensors only "
          "(convert it with .to_dense() or .dequantize())",
          show_name(name), tensor.is_quantized() ? "quantized" : "not strided (sparse or mkldnn)");
    const std::optional<Dtype> dtype = to_dtype(tensor.scalar_type());
    if (!dtype)
      accel::detail::fail(
          "cannot write safetensors: tensor {} is {}, which safetensors (as accel writes it) has "
          "no dtype for; convert it to one of {}",
          show_name(name), c10::toString(tensor.scalar_type()), dtype_names());
    dtypes.push_back(*dtype);
    p.order.push_back(p.order.size());
  }
  std::sort(p.order.begin(), p.order.end(), [&](std::size_t a, std::size_t b) {
    const int ra = reference_rank(dtypes[a]), rb = reference_rank(dtypes[b]);
    return ra != rb ? ra > rb : tensors[a].first < tensors[b].first;
  });
  for (const std::size_t i : p.order) {
    const torch::Tensor& t = tensors[i].second;
    const auto bytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
    p.entries.push_back(
        Entry{tensors[i].first, dtypes[i], t.sizes().vec(), p.data_bytes, p.data_bytes + bytes});
    p.data_bytes += bytes;
  }
  p.header = serialize_header(p.entries, metadata);
  return p;
}

}  // namespace detail

class File {
 public:
  // The whole file, read into one buffer, and its header checked.
  static File read(const std::filesystem::path& path, Limits limits = {}) {
    posix::Descriptor file(path, O_RDONLY);
    struct stat info {};
    if (::fstat(file.get(), &info) != 0) posix::fail_errno("stat", path);
    if (!S_ISREG(info.st_mode))
      accel::detail::fail("'{}' is not a regular file; a safetensors file was expected",
                          path.string());
    const auto size = static_cast<std::size_t>(info.st_size);
    std::shared_ptr<std::byte[]> buffer(new std::byte[std::max<std::size_t>(size, 1)]);
    file.read_exactly(buffer.get(), size);
    return File(buffer, std::span<const std::byte>(buffer.get(), size), path.string(), limits);
  }
  // Bytes already in memory; `source` names them in errors.
  static File from_bytes(std::string bytes, std::string source, Limits limits = {}) {
    auto owned = std::make_shared<const std::string>(std::move(bytes));
    const auto span = std::as_bytes(std::span(owned->data(), owned->size()));
    return File(std::move(owned), span, std::move(source), limits);
  }

  const Header& header() const { return header_; }
  const std::string& source() const { return source_; }
  std::span<const std::byte> bytes() const { return bytes_; }
  // One tensor's bytes, in place.
  std::span<const std::byte> data(const Entry& entry) const {
    return bytes_.subspan(8 + header_.header_bytes + entry.begin, entry.bytes());
  }

  // A new contiguous CPU tensor holding a copy of the named one.
  torch::Tensor tensor(std::string_view name) const {
    const Entry* entry = header_.find(name);
    if (!entry) {
      std::vector<std::string> some;
      for (std::size_t i = 0; i < header_.by_name.size() && i < 5; ++i)
        some.push_back(detail::show_name(header_.entries[header_.by_name[i]].name));
      accel::detail::fail(
          "'{}' has no tensor {}; it has {} tensor{}{}{}{}", source_, detail::show_name(name),
          header_.entries.size(), header_.entries.size() == 1 ? "" : "s", some.empty() ? "" : ": ",
          fmt::join(some, ", "), header_.entries.size() > some.size() ? ", ..." : "");
    }
    return tensor(*entry);
  }
  torch::Tensor tensor(const Entry& entry) const {
    const std::optional<c10::ScalarType> type = to_scalar_type(entry.dtype);
    if (!type)
      accel::detail::fail(
          "'{}': tensor {} is {}, which libtorch {} has no dtype for (float8 needs libtorch 2.1 or "
          "newer)",
          source_, detail::show_name(entry.name), name(entry.dtype), TORCH_VERSION);
    const std::span<const std::byte> bytes = data(entry);
    // A torch bool must be 0 or 1; any other byte is undefined behaviour in its kernels.
    if (entry.dtype == Dtype::BOOL)
      for (std::size_t i = 0; i < bytes.size(); ++i)
        if (static_cast<std::uint8_t>(bytes[i]) > 1)
          accel::detail::fail(
              "'{}': tensor {} is BOOL, but its element {} is byte {:#04x}; BOOL elements are 0 or "
              "1",
              source_, detail::show_name(entry.name), i, static_cast<std::uint8_t>(bytes[i]));
    torch::Tensor out = torch::empty(entry.shape, torch::TensorOptions().dtype(*type));
    if (!bytes.empty()) std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
    return out;
  }
  // Every tensor, in the file's order.
  std::vector<std::pair<std::string, torch::Tensor>> tensors() const {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const Entry& entry : header_.entries) out.emplace_back(entry.name, tensor(entry));
    return out;
  }

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
inline std::string serialize(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
  const detail::Plan plan = detail::plan(tensors, metadata);
  std::string out;
  out.reserve(plan.header.size() + plan.data_bytes);
  out += plan.header;
  for (const std::size_t i : plan.order) {
    const torch::Tensor& t = tensors[i].second;
    const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
    if (bytes == 0) continue;
    if (t.device().is_cpu() && t.is_contiguous()) {
      out.append(static_cast<const char*>(t.data_ptr()), bytes);
    } else {
      const std::size_t at = out.size();
      out.resize(at + bytes);
      torch::from_blob(out.data() + at, t.sizes(), torch::TensorOptions().dtype(t.scalar_type()))
          .copy_(t.detach());
    }
  }
  return out;
}

// Written straight from each tensor's memory after the header (no buffer of the whole file; a
// non-contiguous or device tensor is copied to a contiguous CPU one first, one at a time), then
// fsync'd and closed; a failure names the file and the system's reason, and removes the file.
// Not atomic by itself: save_weights (weights.hpp) writes to a temporary name and renames.
// `observe`, when given, sees every byte written, in order (a checkpoint hashes the file as it
// goes, without reading it back); returns the file's size.
inline std::uint64_t write_file(
    const std::filesystem::path& path,
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata = {},
    const std::function<void(const void*, std::size_t)>& observe = {}) {
  const detail::Plan plan = detail::plan(tensors, metadata);
  posix::Descriptor file(path, O_WRONLY | O_CREAT | O_TRUNC);
  auto write = [&](const void* data, std::size_t size) {
    file.write_all(data, size);
    if (observe) observe(data, size);
  };
  try {
    write(plan.header.data(), plan.header.size());
    for (const std::size_t i : plan.order) {
      const torch::Tensor t = tensors[i].second.detach().to(torch::kCPU).contiguous();
      if (t.numel() > 0) write(t.data_ptr(), static_cast<std::size_t>(t.numel()) * t.element_size());
    }
    file.sync();
    file.close();
  } catch (...) {
    ::unlink(path.c_str());
    throw;
  }
  return plan.header.size() + plan.data_bytes;
}

}  // namespace accel::state::safetensors
