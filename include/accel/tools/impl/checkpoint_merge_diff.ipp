// accel-launch checkpoint merge and diff, the two subcommands that read a checkpoint's tensors
// whole (through checkpoint_tool.ipp's detail functions, included before this file);
// checkpoint_tool.hpp includes it.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "../../detail/error.hpp"
#include "../../detail/shape_text.hpp"
#include "../../state/byte_size.hpp"
#include "../../state/checkpoint_folder.hpp"
#include "../checkpoint_tool.hpp"
#include "../../state/manifest.hpp"
#include "../../state/safetensors.hpp"
#include "../../state/slice_catalog.hpp"
#include "../../state/weights.hpp"
#include "checkpoint_tool.ipp"

namespace accel::state {

namespace detail {

// Makes `out` (or finds it an empty folder) and checks that this user can write into it; returns
// the folders it made, deepest first.
inline std::vector<std::filesystem::path> make_output_folder(const std::filesystem::path& out) {
  std::error_code error;
  if (std::filesystem::exists(out, error) &&
      (!std::filesystem::is_directory(out, error) || !std::filesystem::is_empty(out, error)))
    accel::detail::fail("checkpoint merge: '{}' exists and is not an empty folder; merge writes "
                        "only into a new or empty folder, so that it replaces nothing; choose "
                        "another",
                        out.string());
  std::vector<std::filesystem::path> made;
  for (auto path = std::filesystem::absolute(out, error);
       !error && path.has_relative_path() &&
       !std::filesystem::exists(std::filesystem::symlink_status(path, error));
       path = path.parent_path())
    made.push_back(path);
  error.clear();
  std::filesystem::create_directories(out, error);
  if (error || ::access(out.c_str(), W_OK | X_OK) != 0) {
    const std::string why = error ? error.message() : std::strerror(errno);
    for (const auto& path : made) std::filesystem::remove(path, error);
    accel::detail::fail("checkpoint merge: cannot make or write the folder '{}' ({}); nothing "
                        "was read. Choose an OUT folder this user can create",
                        out.string(), why);
  }
  return made;
}

inline void write_merged(const Manifest& m, const SliceCatalog& catalog,
                         const std::filesystem::path& folder, const std::filesystem::path& out,
                         const MergeOptions& options) {
  const std::string where = folder.string();
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto* list : {&m.models[options.model].parameters, &m.models[options.model].buffers})
    for (const TensorRecord& t : *list)
      named.emplace_back(t.name, whole_model_tensor(catalog, options.model, t, where));
  std::vector<std::pair<std::string, torch::Tensor>> state;
  if (options.optimizer)
    for (std::size_t o = 0; o < m.optimizers.size(); ++o)
      for (auto& entry : whole_optimizer_state(catalog, o)) state.push_back(std::move(entry));
  save_weights(out, named, options.max_shard_bytes);
  if (options.optimizer) {
    TemporaryFile file(out / "optimizer.safetensors");
    safetensors::write_file(file.path(), state, {{"format", "pt"}}, {});
    file.commit();
  }
}

}  // namespace detail

inline void merge_checkpoint(const std::filesystem::path& folder,
                                 const std::filesystem::path& out, const MergeOptions& options) {
  const Manifest m = Manifest::read(folder, "checkpoint merge");
  if (options.model >= m.models.size())
    accel::detail::fail("checkpoint merge: --model {}: '{}' holds {} model{} (#0{})",
                        options.model, folder.string(), m.models.size(),
                        m.models.size() == 1 ? "" : "s",
                        m.models.size() > 1 ? fmt::format(" to #{}", m.models.size() - 1) : "");
  // OUT is made (or found empty and writable) before the checkpoint, maybe gigabytes, is read;
  // the folders made are taken away again if the merge fails.
  const std::vector<std::filesystem::path> made = detail::make_output_folder(out);
  try {
    detail::write_merged(m, read_checkpoint_files(folder, m, "checkpoint merge"), folder, out,
                         options);
  } catch (...) {
    std::error_code ignored;
    for (const auto& path : made) std::filesystem::remove(path, ignored);  // only if empty
    throw;
  }
}

inline std::vector<TensorDifference> diff_checkpoints(const std::filesystem::path& a,
                                                          const std::filesystem::path& b) {
  const Manifest ma = Manifest::read(a, "checkpoint diff");
  const Manifest mb = Manifest::read(b, "checkpoint diff");
  const SliceCatalog ca = read_checkpoint_files(a, ma, "checkpoint diff");
  const SliceCatalog cb = read_checkpoint_files(b, mb, "checkpoint diff");
  auto tensors = [](const Manifest& m, const SliceCatalog& catalog, const std::string& where) {
    std::vector<std::pair<std::string, torch::Tensor>> all;
    for (std::size_t i = 0; i < m.models.size(); ++i)
      for (const auto* list : {&m.models[i].parameters, &m.models[i].buffers})
        for (const TensorRecord& t : *list)
          all.emplace_back(model_tensor_name(i, t.name),
                           detail::whole_model_tensor(catalog, i, t, where));
    for (std::size_t o = 0; o < m.optimizers.size(); ++o)
      for (auto& entry : detail::whole_optimizer_state(catalog, o)) all.push_back(std::move(entry));
    return all;
  };
  const auto ta = tensors(ma, ca, a.string());
  const auto tb = tensors(mb, cb, b.string());
  std::map<std::string, const torch::Tensor*> in_b;
  for (const auto& [name, t] : tb) in_b.emplace(name, &t);
  std::vector<TensorDifference> rows;
  for (const auto& [name, x] : ta) {
    const auto found = in_b.find(name);
    if (found == in_b.end()) {
      rows.push_back({name, "only in A"});
      continue;
    }
    const torch::Tensor& y = *found->second;
    in_b.erase(found);
    if (x.sizes() != y.sizes()) {
      rows.push_back({name, fmt::format("shape [{}] vs [{}]", accel::detail::shape_text(x.sizes()),
                                        accel::detail::shape_text(y.sizes()))});
      continue;
    }
    if (x.scalar_type() != y.scalar_type()) {
      rows.push_back({name, fmt::format("dtype {} vs {}", c10::toString(x.scalar_type()),
                                        c10::toString(y.scalar_type()))});
      continue;
    }
    const torch::Tensor same = detail::same_elements(x, y);
    TensorDifference row{name, same.all().item<bool>() ? "equal" : "differs"};
    if (x.is_floating_point()) {
      row.nan_a = x.isnan().sum().item<std::int64_t>();
      row.nan_b = y.isnan().sum().item<std::int64_t>();
    }
    // The largest differences over the elements that differ and are numbers on both sides (a
    // NaN on one side is counted above, not measured).
    const torch::Tensor measured = row.status == "differs" && x.is_floating_point()
                                       ? same.logical_not()
                                             .logical_and(x.isnan().logical_not())
                                             .logical_and(y.isnan().logical_not())
                                       : same.logical_not();
    if (row.status == "differs" && measured.any().item<bool>()) {
      const torch::Tensor xd = x.masked_select(measured).to(torch::kDouble);
      const torch::Tensor yd = y.masked_select(measured).to(torch::kDouble);
      const torch::Tensor gap = (xd - yd).abs();
      row.max_abs = gap.max().item<double>();
      row.max_rel = torch::where(gap.isinf(), gap, gap / yd.abs().clamp_min(1e-30))
                        .max()
                        .item<double>();
    }
    rows.push_back(std::move(row));
  }
  for (const auto& [name, t] : tb)
    if (in_b.contains(name)) rows.push_back({name, "only in B"});
  return rows;
}

}  // namespace accel::state
