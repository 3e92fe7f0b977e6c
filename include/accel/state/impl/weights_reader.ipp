// WeightsReader; weights_reader.hpp includes it in header-only mode.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>

#include <cstddef>
#include <span>

#include "../../detail/error.hpp"
#include "../posix_file.hpp"
#include "../safetensors.hpp"
#include "../weights.hpp"
#include "../weights_reader.hpp"

namespace accel::state {

ACCEL_DECL std::int64_t WeightsReader::Tensor::numel() const {
  std::int64_t n = 1;
  for (const auto d : entry.shape) n *= d;
  return n;
}

ACCEL_DECL WeightsReader::WeightsReader(const std::filesystem::path& dir) {
  const auto index_path = dir / weights_index_file, single_path = dir / weights_file;
  const bool has_index = detail::path_exists(index_path);
  if (has_index && detail::path_exists(single_path))
    accel::detail::fail(
        "'{}' holds both {} and {}, two layouts of the weights; remove the one that is stale",
        dir.string(), weights_file, weights_index_file);
  if (!has_index) {
    if (!detail::path_exists(single_path))
      accel::detail::fail("'{}' holds neither {} nor {}; it is not a weights folder", dir.string(),
                          weights_file, weights_index_file);
    add_file(single_path, nullptr, {});
    return;
  }
  const std::map<std::string, std::string> weight_map = detail::read_weight_map(index_path);
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [tensor, file] : weight_map) by_file[file].push_back(tensor);
  for (const auto& [file_name, tensors] : by_file)
    if (!detail::path_exists(dir / file_name))
      accel::detail::fail("'{}' maps tensor {} to '{}', which does not exist", index_path.string(),
                          safetensors::detail::show_name(tensors.front()),
                          (dir / file_name).string());
  for (const auto& [file_name, tensors] : by_file) add_file(dir / file_name, &weight_map, index_path);
}

// One file's header, read alone (the tensors' bytes stay on disk), checked as a whole file's
// would be, and its tensors added; with an index, they must be exactly the ones it maps here.
ACCEL_DECL void WeightsReader::add_file(const std::filesystem::path& path,
                                        const std::map<std::string, std::string>* weight_map,
                                        const std::filesystem::path& index_path) {
  posix::Descriptor descriptor(path, O_RDONLY);
  const std::uint64_t size = descriptor.size();
  std::string head(std::min<std::uint64_t>(size, 8), '\0');
  descriptor.read_at(head.data(), head.size(), 0);
  if (head.size() == 8) {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<std::uint8_t>(head[i]);
    // parse_header refuses a length over the limit or past the end before reading the JSON.
    if (n <= safetensors::Limits{}.max_header_bytes && n <= size - 8) {
      head.resize(8 + n);
      descriptor.read_at(head.data() + 8, n, 8);
    }
  }
  const safetensors::Header header = safetensors::parse_header(
      std::as_bytes(std::span(head.data(), head.size())), size, path.string());
  const std::size_t index = files_.size();
  files_.push_back({path, 8 + header.header_bytes});
  const std::string file_name = path.filename().string();
  if (weight_map != nullptr) {
    for (const auto& [tensor, file] : *weight_map)
      if (file == file_name && header.find(tensor) == nullptr)
        accel::detail::fail("'{}' maps tensor {} to '{}', which does not hold it",
                            index_path.string(), safetensors::detail::show_name(tensor),
                            path.string());
  }
  for (const safetensors::Entry& entry : header.entries) {
    if (weight_map != nullptr) {
      const auto mapped = weight_map->find(entry.name);
      if (mapped == weight_map->end())
        accel::detail::fail(
            "'{}' holds tensor {}, which '{}' does not list; the index and the files disagree",
            path.string(), safetensors::detail::show_name(entry.name), index_path.string());
      if (mapped->second != file_name)
        accel::detail::fail(
            "tensor {} is in '{}', but the index maps it to '{}'; a tensor must be in one file "
            "only, the one the index names",
            safetensors::detail::show_name(entry.name), path.string(),
            (path.parent_path() / mapped->second).string());
    }
    by_name_.emplace(entry.name, tensors_.size());
    tensors_.push_back({entry.name, index, entry});
  }
}

ACCEL_DECL torch::Tensor WeightsReader::read(const Tensor& tensor, std::int64_t begin,
                                             std::int64_t numel) const {
  const File& file = files_[tensor.file];
  const auto type = safetensors::to_scalar_type(tensor.entry.dtype);
  if (!type)
    accel::detail::fail(
        "'{}': tensor {} is {}, which libtorch {} has no dtype for (float8 needs libtorch 2.1 or "
        "newer)",
        file.path.string(), safetensors::detail::show_name(tensor.name),
        safetensors::name(tensor.entry.dtype), TORCH_VERSION);
  if (begin < 0 || numel < 0 || begin + numel > tensor.numel())
    accel::detail::fail("'{}': elements {}..{} of tensor {} asked for; it has {}",
                        file.path.string(), begin, begin + numel - 1,
                        safetensors::detail::show_name(tensor.name), tensor.numel());
  torch::Tensor out = torch::empty({numel}, torch::TensorOptions().dtype(*type));
  const std::uint64_t element = safetensors::element_size(tensor.entry.dtype);
  const std::uint64_t bytes = static_cast<std::uint64_t>(numel) * element;
  if (bytes > 0) {
    posix::Descriptor descriptor(file.path, O_RDONLY);
    descriptor.read_at(out.data_ptr(), bytes,
                       file.data_offset + tensor.entry.begin +
                           static_cast<std::uint64_t>(begin) * element);
    bytes_read() += bytes;
  }
  // A torch bool must be 0 or 1; any other byte is undefined behaviour in its kernels.
  if (tensor.entry.dtype == safetensors::Dtype::BOOL && bytes > 0) {
    const torch::Tensor raw = out.view(torch::kUInt8);
    const torch::Tensor bad = raw.gt(1).nonzero();
    if (bad.numel() > 0) {
      const std::int64_t at = bad[0][0].item<std::int64_t>();
      accel::detail::fail("'{}': tensor {} is BOOL, but its element {} is byte {:#04x}; BOOL "
                          "elements are 0 or 1",
                          file.path.string(), safetensors::detail::show_name(tensor.name),
                          begin + at, raw[at].item<std::uint8_t>());
    }
  }
  return out;
}

}  // namespace accel::state
