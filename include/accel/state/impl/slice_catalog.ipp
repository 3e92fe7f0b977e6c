// SliceCatalog; slice_catalog.hpp includes it in header-only mode.
#pragma once

#include <fmt/ranges.h>

#include "../checksum.hpp"
#include "../posix_file.hpp"
#include "../slice_catalog.hpp"

namespace accel::state {

ACCEL_DECL void SliceCatalog::add(safetensors::File file, std::string label) {
  const std::size_t f = files_.size();
  const auto& entries = file.header().entries;
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const auto& entry = entries[e];
    const std::string& name = entry.name;
    const auto at = name.rfind('@');
    std::int64_t begin = 0;
    if (at != std::string::npos) {
      const char* first = name.data() + at + 1;
      const char* last = name.data() + name.size();
      auto [end, error] = std::from_chars(first, last, begin);
      std::int64_t numel = 1;
      for (const auto d : entry.shape) numel *= d;
      if (error == std::errc() && end == last && begin >= 0) {
        slices_[name.substr(0, at)].push_back({f, e, begin, numel, 1, numel, numel});
        continue;
      }
      // A block of rows, "<tensor>@<begin>:<stride>", stored [rows, width].
      std::int64_t stride = 0;
      if (error == std::errc() && end != last && *end == ':' && begin >= 0) {
        const auto [stride_end, stride_error] = std::from_chars(end + 1, last, stride);
        if (stride_error == std::errc() && stride_end == last && entry.shape.size() == 2 &&
            entry.shape[1] > 0 && stride >= entry.shape[1]) {
          slices_[name.substr(0, at)].push_back(
              {f, e, begin, numel, entry.shape[0], entry.shape[1], stride});
          continue;
        }
      }
    }
    whole_.emplace(name, f);
  }
  files_.push_back(std::move(file));
  labels_.push_back(std::move(label));
}

ACCEL_DECL torch::Tensor SliceCatalog::whole(const std::string& name) const {
  const auto found = whole_.find(name);
  if (found == whole_.end())
    accel::detail::fail("checkpoint: no tensor '{}' in its rank files ({}); was it saved by "
                        "another program or version?",
                        name, fmt::join(labels_, ", "));
  return files_[found->second].tensor(name);
}

ACCEL_DECL std::vector<std::string> SliceCatalog::sliced_under(const std::string& prefix) const {
  std::vector<std::string> names;
  for (auto it = slices_.lower_bound(prefix); it != slices_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    names.push_back(it->first);
  }
  return names;
}

namespace detail {
// Rounded towards minus infinity (the rows before a position may be negative).
inline std::int64_t floor_divide(std::int64_t a, std::int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}
}  // namespace detail

ACCEL_DECL torch::Tensor SliceCatalog::read_rows(const std::string& tensor, std::int64_t begin,
                                                 std::int64_t rows, std::int64_t width,
                                                 std::int64_t stride,
                                                 c10::ScalarType dtype) const {
  const auto found = slices_.find(tensor);
  if (found == slices_.end())
    accel::detail::fail("checkpoint: tensor '{}' is not in its rank files ({}); the model or "
                        "optimizer differs from the one saved",
                        tensor, fmt::join(labels_, ", "));
  const std::int64_t numel = rows * width;
  // One contiguous slice holding all of a contiguous range (a checkpoint loaded with the layout
  // it was saved with): a view of its bytes.
  if (rows == 1)
    for (const auto& slice : found->second)
      if (slice.rows == 1 && slice.begin <= begin && slice.begin + slice.numel >= begin + numel)
        return stored(slice, dtype).narrow(0, begin - slice.begin, numel);
  torch::Tensor out = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
  std::vector<char> filled(static_cast<std::size_t>(numel), 0);
  for (const auto& slice : found->second) {
    torch::Tensor from;  // read once it covers something
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t a = begin + r * stride, b = a + width;  // this row: [a, b)
      // The slice's rows that meet it: those starting before b and ending after a.
      const std::int64_t first =
          std::max<std::int64_t>(0, detail::floor_divide(a - slice.begin - slice.width,
                                                         slice.stride) + 1);
      const std::int64_t last = std::min<std::int64_t>(
          slice.rows - 1, detail::floor_divide(b - 1 - slice.begin, slice.stride));
      for (std::int64_t s = first; s <= last; ++s) {
        const std::int64_t row_begin = slice.begin + s * slice.stride;
        const std::int64_t lo = std::max(a, row_begin), hi = std::min(b, row_begin + slice.width);
        if (hi <= lo) continue;
        if (!from.defined()) from = stored(slice, dtype);
        const std::int64_t at = r * width + (lo - a);
        out.narrow(0, at, hi - lo)
            .copy_(from.narrow(0, s * slice.width + (lo - row_begin), hi - lo));
        std::fill(filled.begin() + at, filled.begin() + at + (hi - lo), 1);
      }
    }
  }
  const auto gap = std::find(filled.begin(), filled.end(), 0);
  if (gap != filled.end()) {
    // The first missing element, to the end of its row, in the full tensor's numbering.
    const std::int64_t k = gap - filled.begin();
    const std::int64_t row = k / width, first = begin + row * stride + k % width;
    accel::detail::fail("checkpoint: elements {}..{} of '{}' are in none of its rank files ({}); "
                        "the checkpoint is incomplete, or the tensor is larger than the one "
                        "saved",
                        first, begin + row * stride + width - 1, tensor, fmt::join(labels_, ", "));
  }
  return out;
}

ACCEL_DECL torch::Tensor SliceCatalog::stored(const Slice& slice, c10::ScalarType dtype) const {
  const safetensors::File& file = files_[slice.file];
  const safetensors::Entry& entry = file.header().entries[slice.entry];
  const auto type = safetensors::to_scalar_type(entry.dtype);
  if (type != dtype)
    accel::detail::fail("checkpoint: '{}' in {} is {}, the live tensor is {}; load into a "
                        "model of the dtype it was saved with",
                        entry.name, labels_[slice.file], safetensors::name(entry.dtype),
                        c10::toString(dtype));
  const auto bytes = file.data(entry);
  const auto address = reinterpret_cast<std::uintptr_t>(bytes.data());
  if (entry.dtype == safetensors::Dtype::BOOL ||
      address % static_cast<std::uintptr_t>(c10::elementSize(dtype)) != 0)
    return file.tensor(entry).reshape({-1});
  return torch::from_blob(const_cast<std::byte*>(bytes.data()), {slice.numel},
                          torch::TensorOptions().dtype(dtype));
}

ACCEL_DECL SliceCatalog::Coverage SliceCatalog::coverage(const std::string& tensor) const {
  Coverage result;
  const auto found = slices_.find(tensor);
  if (found == slices_.end()) {
    result.problem = fmt::format("'{}' is in no rank file", tensor);
    return result;
  }
  // Each slice as its rows (one for a contiguous slice), in the full tensor's order: they tile
  // it when each starts where the one before it ended.
  struct Row {
    std::int64_t begin;
    std::int64_t numel;
    const Slice* slice;
  };
  std::vector<Row> sorted;
  for (const auto& slice : found->second)
    for (std::int64_t r = 0; r < slice.rows; ++r)
      sorted.push_back({slice.begin + r * slice.stride, slice.width, &slice});
  std::sort(sorted.begin(), sorted.end(),
            [](const Row& a, const Row& b) { return a.begin < b.begin; });
  auto dtype_of = [&](const Slice& s) { return files_[s.file].header().entries[s.entry].dtype; };
  const Slice& front = *sorted.front().slice;
  result.dtype = safetensors::to_scalar_type(dtype_of(front));
  for (const Row& row : sorted) {
    const Slice* slice = row.slice;
    if (row.begin != result.end) {
      result.problem =
          row.begin > result.end
              ? fmt::format("elements {}..{} of '{}' are in no rank file", result.end,
                            row.begin - 1, tensor)
              : fmt::format("'{}' holds elements from {} twice ({} overlaps the slice before it)",
                            tensor, row.begin, labels_[slice->file]);
      return result;
    }
    if (dtype_of(*slice) != dtype_of(front)) {
      result.problem = fmt::format("'{}' is {} in {} and {} in {}", tensor,
                                   safetensors::name(dtype_of(front)), labels_[front.file],
                                   safetensors::name(dtype_of(*slice)), labels_[slice->file]);
      return result;
    }
    result.end += row.numel;
  }
  return result;
}

ACCEL_DECL std::optional<std::string> read_rank_file(const std::filesystem::path& folder,
                                                    const FileRecord& file, std::string& bytes) {
  const std::filesystem::path path = folder / file.name;
  std::error_code missing;
  if (!std::filesystem::is_regular_file(path, missing))
    return fmt::format("'{}' is missing; the manifest names it, so the checkpoint is incomplete "
                       "(copied in part?)",
                       path.string());
  bytes = posix::read_file(path);
  if (bytes.size() != file.bytes)
    return fmt::format("'{}' holds {} bytes, the manifest says {}; the file was truncated or "
                       "replaced",
                       path.string(), bytes.size(), file.bytes);
  const std::string sum = checksum_hex(checksum(bytes.data(), bytes.size()));
  if (sum != file.xxh3)
    return fmt::format("'{}' has checksum {}, the manifest says {}; the file is corrupt",
                       path.string(), sum, file.xxh3);
  return std::nullopt;
}

ACCEL_DECL SliceCatalog read_checkpoint_files(const std::filesystem::path& folder,
                                              const Manifest& manifest, std::string_view call) {
  SliceCatalog catalog;
  for (const FileRecord& file : manifest.files) {
    std::string bytes;
    if (const auto problem = read_rank_file(folder, file, bytes))
      accel::detail::fail("{}: {}", call, *problem);
    const std::string label = (folder / file.name).string();
    catalog.add(safetensors::File::from_bytes(std::move(bytes), label), label);
  }
  return catalog;
}

}  // namespace accel::state
