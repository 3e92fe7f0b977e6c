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
      const auto [end, error] = std::from_chars(first, last, begin);
      if (error == std::errc() && end == last && begin >= 0) {
        std::int64_t numel = 1;
        for (const auto d : entry.shape) numel *= d;
        slices_[name.substr(0, at)].push_back({f, e, begin, numel});
        continue;
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

ACCEL_DECL torch::Tensor SliceCatalog::read(const std::string& tensor, std::int64_t begin,
                                            std::int64_t numel, c10::ScalarType dtype) const {
  const auto found = slices_.find(tensor);
  if (found == slices_.end())
    accel::detail::fail("checkpoint: tensor '{}' is not in its rank files ({}); the model or "
                        "optimizer differs from the one saved",
                        tensor, fmt::join(labels_, ", "));
  std::vector<const Slice*> covering;
  for (const auto& slice : found->second)
    if (slice.begin < begin + numel && slice.begin + slice.numel > begin) covering.push_back(&slice);
  std::sort(covering.begin(), covering.end(),
            [](const Slice* a, const Slice* b) { return a->begin < b->begin; });
  if (covering.size() == 1 && covering.front()->begin <= begin &&
      covering.front()->begin + covering.front()->numel >= begin + numel)
    return stored(*covering.front(), dtype).narrow(0, begin - covering.front()->begin, numel);
  torch::Tensor out = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
  std::int64_t next = begin;  // the first element not yet filled
  for (const Slice* slice : covering) {
    if (slice->begin > next) break;
    const torch::Tensor stored = this->stored(*slice, dtype);
    const std::int64_t from = std::max(next, slice->begin);
    const std::int64_t to = std::min(begin + numel, slice->begin + slice->numel);
    if (to <= from) continue;
    out.narrow(0, from - begin, to - from).copy_(stored.narrow(0, from - slice->begin, to - from));
    next = to;
  }
  if (next < begin + numel)
    accel::detail::fail("checkpoint: elements {}..{} of '{}' are in none of its rank files ({}); "
                        "the checkpoint is incomplete, or the tensor is larger than the one "
                        "saved",
                        next, begin + numel - 1, tensor, fmt::join(labels_, ", "));
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
  std::vector<const Slice*> sorted;
  for (const auto& slice : found->second) sorted.push_back(&slice);
  std::sort(sorted.begin(), sorted.end(),
            [](const Slice* a, const Slice* b) { return a->begin < b->begin; });
  auto dtype_of = [&](const Slice& s) { return files_[s.file].header().entries[s.entry].dtype; };
  result.dtype = safetensors::to_scalar_type(dtype_of(*sorted.front()));
  for (const Slice* slice : sorted) {
    if (slice->begin != result.end) {
      result.problem =
          slice->begin > result.end
              ? fmt::format("elements {}..{} of '{}' are in no rank file", result.end,
                            slice->begin - 1, tensor)
              : fmt::format("'{}' holds elements from {} twice ({} overlaps the slice before it)",
                            tensor, slice->begin, labels_[slice->file]);
      return result;
    }
    if (dtype_of(*slice) != dtype_of(*sorted.front())) {
      result.problem = fmt::format("'{}' is {} in {} and {} in {}", tensor,
                                   safetensors::name(dtype_of(*sorted.front())),
                                   labels_[sorted.front()->file],
                                   safetensors::name(dtype_of(*slice)), labels_[slice->file]);
      return result;
    }
    result.end += slice->numel;
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
