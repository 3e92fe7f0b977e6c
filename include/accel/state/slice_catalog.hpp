// The tensors of a checkpoint's rank files, found by name, with parameters and optimizer state
// read back as any slice of their flattened elements. A checkpoint names a slice
// "<tensor>@<first element>": Ddp's rank 0 writes "model0/fc.weight@0", the whole of it; Zero3's
// ranks write their pieces, "model0/fc.weight@0" and "model0/fc.weight@4096". Any reader asks for
// the elements it holds ([begin, begin + numel)) and gets them from whichever pieces cover them,
// which is what makes a checkpoint load at another world size and under another strategy.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "safetensors.hpp"

namespace accel::state {

inline std::string slice_name(std::string_view tensor, std::int64_t begin) {
  return fmt::format("{}@{}", tensor, begin);
}

class SliceCatalog {
 public:
  // Takes a parsed rank file; `label` names it in errors (its path).
  void add(safetensors::File file, std::string label) {
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

  bool has(const std::string& name) const { return whole_.count(name) != 0; }

  // A tensor stored whole (not as slices): from the first file that holds it.
  torch::Tensor whole(const std::string& name) const {
    const auto found = whole_.find(name);
    if (found == whole_.end())
      accel::detail::fail("checkpoint: no tensor '{}' in its rank files ({}); was it saved by "
                          "another program or version?",
                          name, fmt::join(labels_, ", "));
    return files_[found->second].tensor(name);
  }

  // The names under `prefix` stored as slices (their part before '@'), for optimizer state.
  std::vector<std::string> sliced_under(const std::string& prefix) const {
    std::vector<std::string> names;
    for (auto it = slices_.lower_bound(prefix); it != slices_.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      names.push_back(it->first);
    }
    return names;
  }

  // Elements [begin, begin + numel) of the flattened `tensor`, as `dtype`, from every slice that
  // covers part of them; an element no slice covers is an error naming the tensor. Where one
  // slice covers them all (a checkpoint loaded with the layout it was saved with) the result is
  // a read-only view of the file's bytes, valid while this catalog lives: loading then copies
  // each element once, into the live tensor.
  torch::Tensor read(const std::string& tensor, std::int64_t begin, std::int64_t numel,
                     c10::ScalarType dtype) const {
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

 private:
  struct Slice {
    std::size_t file;
    std::size_t entry;  // in its file's header
    std::int64_t begin;
    std::int64_t numel;
  };

  // A slice's elements, flattened: a view of the file's bytes where their dtype and alignment
  // allow, a copy otherwise.
  torch::Tensor stored(const Slice& slice, c10::ScalarType dtype) const {
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
  std::vector<safetensors::File> files_;
  std::vector<std::string> labels_;
  std::map<std::string, std::vector<Slice>> slices_;
  std::multimap<std::string, std::size_t> whole_;
};

}  // namespace accel::state
