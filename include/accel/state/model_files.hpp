// Accelerator::save_model / load_model (docs/how-to/resume.md): a prepared model's consolidated
// weights as safetensors files (weights.hpp), and such files (or other tools') read back into
// it. Not part of a training-state checkpoint: no manifest, no optimizer, and any world size
// and strategy on either side. Reached through state::CheckpointIO (checkpoint_io.hpp) with the
// Accelerator's CheckpointView (checkpoint_view.hpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/shape_text.hpp"
#include "../parallel/full_parameters.hpp"
#include "../runtime/process_group.hpp"
#include "components/placed_slices.hpp"
#include "dtype_conversion.hpp"
#include "rank_agreement.hpp"
#include "weights.hpp"
#include "weights_reader.hpp"

namespace accel::state {

namespace detail {
// DtypeConversion::checked: the same kind of number, and no finite value made infinite; else
// an `accel: load_model:` error naming the weight and the folder.
ACCEL_DECL void check_conversion(const std::string& name, const std::filesystem::path& folder,
                                 const torch::Tensor& t, c10::ScalarType to);

// Elements [begin, begin + numel) of a parameter placed in the stored full tensor as `place`
// says (a tensor-parallel slice: rows of it), flattened; by one positioned read per row.
inline torch::Tensor read_placed_weights(const WeightsReader& weights,
                                         const WeightsReader::Tensor& stored, std::int64_t begin,
                                         std::int64_t numel, const parallel::Placement& place) {
  if (place.whole()) return weights.read(stored, begin, numel);
  std::vector<torch::Tensor> rows;
  for (const auto& block : components::full_blocks(place, begin, numel))
    for (std::int64_t r = 0; r < block.rows; ++r)
      rows.push_back(weights.read(stored, block.begin + r * block.stride, block.width));
  return rows.size() == 1 ? rows.front() : torch::cat(rows);
}
}  // namespace detail

// Every rank gathers the full parameters (under a sharded strategy); the main process writes.
template <class View>
void save_model_files(const View& view, torch::nn::Module& model,
                      const std::filesystem::path& folder, std::uint64_t max_shard_bytes) {
  const runtime::ProcessGroup::Caller caller(view.group, "save_model");
  std::string error;
  {
    const parallel::FullParameters full(view.strategy, model);
    error = detail::error_of([&] {
      if (view.rank != 0) return;
      std::vector<std::pair<std::string, torch::Tensor>> named;
      for (const auto& item : model.named_parameters())
        named.emplace_back(item.key(), item.value().detach().to(torch::kCPU));
      for (const auto& item : model.named_buffers())
        named.emplace_back(item.key(), item.value().detach().to(torch::kCPU));
      std::filesystem::create_directories(folder);
      save_weights(folder, named, max_shard_bytes);
    });
  }
  detail::agree(view.group, error, "save_model");
}

// Each rank reads, by positioned reads (weights_reader.hpp), only what it keeps: under a
// sharded strategy its slices of the parameters (and the buffers), under Ddp all of it. Names,
// shapes and dtypes are checked on every rank (and the values that a check needs: a checked
// dtype conversion, BOOL bytes), the ranks agree, and only then are the other values read, one
// tensor at a time, each copied in as soon as it is read: a rank holds its shards and one
// slice, never its shards twice (an empty build filled from a weights folder, docs/how-to/large-models.md).
// A read failing then (an I/O error: the sizes were checked when the folder was opened) leaves
// the model partly loaded; the ranks agree on that error too.
template <class View>
void load_model_files(const View& view, torch::nn::Module& model,
                      const std::filesystem::path& folder, bool strict,
                      DtypeConversion conversion) {
  runtime::ProcessGroup* group = view.group;
  const runtime::ProcessGroup::Caller caller(group, "load_model");
  auto& strategy = view.strategy;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // checked values: into, from
  struct Later {
    const WeightsReader::Tensor* stored;
    torch::Tensor into;
    std::int64_t begin;
    parallel::Placement place;
  };
  std::vector<Later> later;  // read once the ranks agree
  std::optional<WeightsReader> opened;
  std::string error = detail::error_of([&] {
    const WeightsReader& weights = opened.emplace(folder);
    std::vector<std::string> expected, names;
    for (const auto& item : model.named_parameters()) expected.push_back(item.key());
    for (const auto& item : model.named_buffers()) expected.push_back(item.key());
    for (const auto& tensor : weights.tensors()) names.push_back(tensor.name);
    if (strict) {
      const NameCheck check = compare_names(expected, names);
      if (!check.missing.empty() || !check.unexpected.empty())
        accel::detail::fail("load_model: '{}' does not match the model: {}; pass strict = false "
                            "to load the names that match",
                            folder.string(), check.describe());
    }
    auto read = [&](const std::string& name, const std::vector<std::int64_t>& shape,
                    c10::ScalarType dtype, const torch::Tensor& into, std::int64_t begin,
                    const parallel::Placement& place) -> void {
      const WeightsReader::Tensor* found = weights.find(name);
      if (found == nullptr) return;  // not strict: left as it is
      if (found->entry.shape != shape)
        accel::detail::fail("load_model: '{}' in '{}' has shape [{}], the model's is [{}]", name,
                            folder.string(), accel::detail::shape_text(found->entry.shape),
                            accel::detail::shape_text(shape));
      const auto stored = safetensors::to_scalar_type(found->entry.dtype);
      const bool check_values = !stored || found->entry.dtype == safetensors::Dtype::BOOL ||
                                (conversion == DtypeConversion::checked && *stored != dtype);
      if (!check_values) {
        later.push_back({found, into, begin, place});
        return;
      }
      torch::Tensor value =
          detail::read_placed_weights(weights, *found, begin, into.numel(), place);
      if (conversion == DtypeConversion::checked)
        detail::check_conversion(name, folder, value, dtype);
      copies.emplace_back(into, std::move(value));
    };
    for (const auto& item : model.named_parameters()) {
      const torch::Tensor& p = item.value();
      if (const auto slice = strategy.loaded_slice(p))
        read(item.key(), strategy.parameter_shape(p), p.scalar_type(), slice->data, slice->begin,
             slice->placement);
    }
    for (const auto& item : model.named_buffers()) {
      const torch::Tensor& b = item.value();
      read(item.key(), b.sizes().vec(), b.scalar_type(), b.view({-1}), 0, parallel::Placement{});
    }
  });
  detail::agree(group, error, "load_model");
  error = detail::error_of([&] {
    torch::NoGradGuard no_grad;
    for (auto& [into, from] : copies) into.copy_(from);
    copies.clear();
    for (const auto& item : later)
      item.into.copy_(detail::read_placed_weights(*opened, *item.stored, item.begin,
                                                  item.into.numel(), item.place));
  });
  detail::agree(group, error, "load_model: reading the values");
  strategy.after_state_loaded();
}

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/model_files.ipp"
#endif
