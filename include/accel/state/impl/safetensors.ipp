// The safetensors file reader and writer; safetensors.hpp includes it in header-only mode.
#pragma once

#include <fmt/ranges.h>

#include "../safetensors.hpp"

namespace accel::state::safetensors {

ACCEL_DECL std::optional<c10::ScalarType> to_scalar_type(Dtype dtype) {
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

ACCEL_DECL std::optional<Dtype> to_dtype(c10::ScalarType type) {
  for (const Dtype dtype : all_dtypes)
    if (to_scalar_type(dtype) == type) return dtype;
  return std::nullopt;
}

}  // namespace accel::state::safetensors

namespace accel::state::safetensors::detail {

ACCEL_DECL Plan plan(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
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

}  // namespace accel::state::safetensors::detail

namespace accel::state::safetensors {

ACCEL_DECL File File::read(const std::filesystem::path& path, Limits limits) {
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

ACCEL_DECL File File::from_bytes(std::string bytes, std::string source, Limits limits) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  const auto span = std::as_bytes(std::span(owned->data(), owned->size()));
  return File(std::move(owned), span, std::move(source), limits);
}

ACCEL_DECL torch::Tensor File::tensor(std::string_view name) const {
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

ACCEL_DECL torch::Tensor File::tensor(const Entry& entry) const {
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

ACCEL_DECL std::vector<std::pair<std::string, torch::Tensor>> File::tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const Entry& entry : header_.entries) out.emplace_back(entry.name, tensor(entry));
  return out;
}

ACCEL_DECL std::string serialize(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
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

ACCEL_DECL std::uint64_t write_file(
    const std::filesystem::path& path,
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata,
    const std::function<void(const void*, std::size_t)>& observe) {
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
