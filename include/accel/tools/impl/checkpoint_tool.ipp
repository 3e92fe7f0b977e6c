// accel-launch checkpoint's four subcommands (inspect, verify, merge, diff), over the same
// reading of a checkpoint folder: inspect and verify, and the reading the four share, here; merge
// and diff in checkpoint_merge_diff.ipp. checkpoint_tool.hpp includes both. The command line
// that picks them is checkpoint_command.ipp.
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

namespace accel::state {

namespace detail {

// The dtype a manifest spells as c10::toString does ("Float", "BFloat16").
inline std::optional<c10::ScalarType> scalar_type_named(const std::string& name) {
  for (const c10::ScalarType type :
       {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kByte, torch::kChar,
        torch::kShort, torch::kInt, torch::kLong, torch::kBool})
    if (name == c10::toString(type)) return type;
  return std::nullopt;
}

inline std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

// A model tensor of the manifest, whole and shaped, from the catalog's slices.
inline torch::Tensor whole_model_tensor(const SliceCatalog& catalog, std::size_t model,
                                        const TensorRecord& record, std::string_view where) {
  const std::string name = model_tensor_name(model, record.name);
  const auto coverage = catalog.coverage(name);
  const auto dtype = scalar_type_named(record.dtype);
  if (!dtype || coverage.dtype != dtype)
    accel::detail::fail("'{}' of model #{} is {} in the manifest of '{}' and {} in its rank files",
                        record.name, model, record.dtype, where,
                        coverage.dtype ? c10::toString(*coverage.dtype) : "unknown");
  // Their elements against the shape before any memory is sized by it (a corrupt shape must
  // not ask for exabytes); a gap or an overlap is left to read(), which names it.
  const std::int64_t elements = element_count(record.shape);
  if (coverage.problem.empty() && coverage.end < elements)
    accel::detail::fail("checkpoint: elements {}..{} of '{}' are in none of its rank files ('{}'); "
                        "the checkpoint is incomplete",
                        coverage.end, elements - 1, name, where);
  if (coverage.problem.empty() && coverage.end > elements)
    accel::detail::fail("'{}' of model #{} has {} elements in the rank files of '{}', its shape "
                        "[{}] in the manifest holds {}; the checkpoint is inconsistent",
                        record.name, model, coverage.end, where,
                        accel::detail::shape_text(record.shape), elements);
  return catalog.read(name, 0, elements, *dtype).view(record.shape);
}

// Every optimizer slot field stored as slices, whole and flat, with the slot's whole "step".
inline std::vector<std::pair<std::string, torch::Tensor>> whole_optimizer_state(
    const SliceCatalog& catalog, std::size_t optimizer) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  std::set<std::string> steps;
  for (const std::string& name : catalog.sliced_under(fmt::format("optimizer{}/", optimizer))) {
    const auto coverage = catalog.coverage(name);
    if (!coverage.problem.empty()) accel::detail::fail("{}", coverage.problem);
    if (!coverage.dtype)
      accel::detail::fail("'{}' has a dtype this libtorch does not have", name);
    named.emplace_back(name, catalog.read(name, 0, coverage.end, *coverage.dtype).clone());
    const std::string step = name.substr(0, name.rfind('/') + 1) + "step";
    if (catalog.has(step) && steps.insert(step).second)
      named.emplace_back(step, catalog.whole(step));
  }
  if (catalog.has(optimizer_archive_name(optimizer)))
    named.emplace_back(optimizer_archive_name(optimizer),
                       catalog.whole(optimizer_archive_name(optimizer)));
  return named;
}

// How tensor parallelism split a parameter: its dimension and each rank's slice.
inline std::string tensor_parallel_text(const TensorRecord& t, int degree) {
  if (t.tensor_parallel_dim < 0) return "";
  std::vector<std::int64_t> slice = t.shape;
  slice[static_cast<std::size_t>(t.tensor_parallel_dim)] /= degree;
  return fmt::format("  tensor-parallel: dim {} split {} ways, [{}] per rank",
                     t.tensor_parallel_dim, degree, accel::detail::shape_text(slice));
}

// A problem repeated for many ranks: the first few listed, the rest counted, so that a manifest
// claiming a million processes yields a readable report and not a million lines.
class ProblemsPerRank {
 public:
  explicit ProblemsPerRank(std::vector<std::string>& problems) : problems_(problems) {}
  void add(std::string problem) {
    if (++count_ <= listed) problems_.push_back(std::move(problem));
  }
  void finish(std::string_view what) {
    if (count_ > listed)
      problems_.push_back(fmt::format("... and {} more {}", count_ - listed, what));
  }

 private:
  static constexpr std::size_t listed = 8;
  std::vector<std::string>& problems_;
  std::size_t count_ = 0;
};

// Element by element, bit for bit, NaN equal to NaN at the same place: a checkpoint compared
// with itself is equal whatever it holds (torch::equal says NaN != NaN, and -0 == +0).
inline torch::Tensor same_elements(const torch::Tensor& x, const torch::Tensor& y) {
  if (!x.is_floating_point()) return x.eq(y);
  const auto bits = [](const torch::Tensor& t) {
    const auto size = t.element_size();
    return t.contiguous().view(size == 1   ? torch::kByte
                               : size == 2 ? torch::kShort
                               : size == 4 ? torch::kInt
                                           : torch::kLong);
  };
  return bits(x).eq(bits(y)).logical_or(x.isnan().logical_and(y.isnan()));
}

}  // namespace detail

inline std::string describe_checkpoint(const std::filesystem::path& folder) {
  const Manifest m = Manifest::read(folder, "checkpoint inspect");
  std::string text = fmt::format("checkpoint {}\n", folder.string());
  text += fmt::format("  format        accel-checkpoint version {} (accel {}, libtorch {})\n",
                      m.format_version, m.accel_version, m.libtorch_version);
  text += fmt::format("  saved by      {} + {} + GradAccum<{}> on {} process{}{}\n", m.parallelism,
                      m.precision, m.accumulation_steps, m.world_size,
                      m.world_size == 1 ? "" : "es", m.split_batches ? ", split_batches" : "");
  text += fmt::format("  mesh          {} data-parallel x {} tensor-parallel{}\n",
                      m.world_size / m.tensor_parallel, m.tensor_parallel,
                      m.tensor_parallel > 1 ? " (split parameters stored as slices of the full "
                                              "tensors)"
                                            : "");
  text += fmt::format("  step          {} optimizer steps completed{}\n", m.completed_steps,
                      m.window.collecting
                          ? fmt::format("; saved mid-window, micro-step {} of {}",
                                        m.window.position, m.window.length)
                          : std::string());
  for (std::size_t i = 0; i < m.models.size(); ++i) {
    const ModelRecord& model = m.models[i];
    std::int64_t elements = 0;
    for (const auto& p : model.parameters) elements += detail::element_count(p.shape);
    text += fmt::format("  model #{}      {} parameters ({} elements), {} buffers\n", i,
                        model.parameters.size(), elements, model.buffers.size());
    for (const auto* list : {&model.parameters, &model.buffers})
      for (const TensorRecord& t : *list)
        text += fmt::format("    {:<40} {:<9} [{}]{}{}\n", t.name, t.dtype,
                            accel::detail::shape_text(t.shape),
                            list == &model.buffers ? "  (buffer)" : "",
                            detail::tensor_parallel_text(t, m.tensor_parallel));
  }
  for (std::size_t i = 0; i < m.optimizers.size(); ++i) {
    const OptimizerRecord& optimizer = m.optimizers[i];
    text += fmt::format("  optimizer #{}  {}, {} param group{}\n", i, optimizer.type,
                        optimizer.groups.size(), optimizer.groups.size() == 1 ? "" : "s");
    for (std::size_t g = 0; g < optimizer.groups.size(); ++g)
      text += fmt::format("    group {}: {} parameters, {}\n", g, optimizer.groups[g].parameters,
                          optimizer.groups[g].options.dump());
  }
  for (std::size_t i = 0; i < m.scheduler_steps.size(); ++i)
    text += fmt::format("  scheduler #{}  {} steps\n", i, m.scheduler_steps[i]);
  for (std::size_t i = 0; i < m.loaders.size(); ++i) {
    const LoaderRecord& l = m.loaders[i];
    text += fmt::format("  loader #{}     epoch {}, {} batches served ({} over all processes); "
                        "{} samples in batches of {}, shuffle {}, seed {}\n",
                        i, l.epoch, l.batches_consumed, l.global_batches_consumed, l.samples,
                        l.batch_size, l.shuffle, l.seed);
  }
  if (!m.precision_state.empty())
    text += fmt::format("  precision     {}\n", m.precision_state.dump());
  if (m.custom_objects > 0)
    text += fmt::format("  registered    {} object{}\n", m.custom_objects,
                        m.custom_objects == 1 ? "" : "s");
  std::uint64_t total = 0;
  for (const FileRecord& file : m.files) {
    std::string bytes;
    const auto problem = read_rank_file(folder, file, bytes);
    total += file.bytes;
    text += fmt::format("  file          {} {} xxh3 {} {}\n", file.name,
                        detail::byte_size_text(file.bytes), file.xxh3,
                        problem ? "FAILS: " + *problem : std::string("checksum ok"));
  }
  text += fmt::format("  total         {} in {} file{}\n", detail::byte_size_text(total),
                      m.files.size(), m.files.size() == 1 ? "" : "s");
  return text;
}

inline std::vector<std::string> verify_checkpoint(const std::filesystem::path& folder) {
  Manifest m;
  try {
    m = Manifest::read(folder, "checkpoint verify");
  } catch (const Error& e) {
    return {e.what()};
  }
  std::vector<std::string> problems;
  std::set<std::string> named;
  for (const FileRecord& file : m.files) named.insert(file.name);
  detail::ProblemsPerRank unnamed(problems);
  for (int r = 0; r < m.world_size; ++r)
    if (!named.contains(rank_file_name(r)))
      unnamed.add(fmt::format("the manifest names no {} for rank {} of {}", rank_file_name(r), r,
                              m.world_size));
  unnamed.finish("ranks have no rank file in the manifest");
  SliceCatalog catalog;
  bool files_whole = true;
  for (const FileRecord& file : m.files) {
    std::string bytes;
    if (const auto problem = read_rank_file(folder, file, bytes)) {
      problems.push_back(*problem);
      files_whole = false;
      continue;
    }
    const std::string label = (folder / file.name).string();
    try {
      catalog.add(safetensors::File::from_bytes(std::move(bytes), label), label);
    } catch (const Error& e) {
      problems.push_back(e.what());
      files_whole = false;
    }
  }
  if (!files_whole) {
    problems.push_back("coverage not checked: a rank file above cannot be read");
    return problems;
  }
  auto covered = [&](const std::string& name, std::int64_t elements, const std::string& dtype) {
    const auto coverage = catalog.coverage(name);
    if (!coverage.problem.empty())
      problems.push_back(coverage.problem);
    else if (coverage.end < elements)
      problems.push_back(fmt::format("elements {}..{} of '{}' are in no rank file", coverage.end,
                                     elements - 1, name));
    else if (coverage.end > elements)
      problems.push_back(fmt::format("'{}' has {} elements in the rank files, its shape holds {}",
                                     name, coverage.end, elements));
    else if (!dtype.empty() && (!coverage.dtype || c10::toString(*coverage.dtype) != dtype))
      problems.push_back(fmt::format("'{}' is {} in the manifest and {} in the rank files", name,
                                     dtype,
                                     coverage.dtype ? c10::toString(*coverage.dtype) : "unknown"));
  };
  for (std::size_t i = 0; i < m.models.size(); ++i)
    for (const auto* list : {&m.models[i].parameters, &m.models[i].buffers})
      for (const TensorRecord& t : *list)
        covered(model_tensor_name(i, t.name), detail::element_count(t.shape), t.dtype);
  for (std::size_t o = 0; o < m.optimizers.size(); ++o) {
    if (m.optimizers[o].type == "other") {
      if (!catalog.has(optimizer_archive_name(o)))
        problems.push_back(fmt::format("'{}' is in no rank file", optimizer_archive_name(o)));
      continue;
    }
    // A slot's fields (exp_avg, exp_avg_sq, ...) each cover the parameter's elements.
    std::map<std::string, std::int64_t> slot_elements;
    for (const std::string& name : catalog.sliced_under(fmt::format("optimizer{}/", o))) {
      const auto coverage = catalog.coverage(name);
      const std::string slot = name.substr(0, name.rfind('/'));
      if (!coverage.problem.empty()) {
        problems.push_back(coverage.problem);
        continue;
      }
      const auto [it, first] = slot_elements.emplace(slot, coverage.end);
      if (!first && it->second != coverage.end)
        problems.push_back(fmt::format("'{}' has {} elements, the other fields of its slot {}",
                                       name, coverage.end, it->second));
    }
  }
  detail::ProblemsPerRank no_generator(problems);
  for (int r = 0; r < m.world_size; ++r)
    if (!catalog.has(rng_tensor_name(r, 0)))
      no_generator.add(fmt::format("'{}' (rank {}'s CPU generator) is in no rank file",
                                   rng_tensor_name(r, 0), r));
  no_generator.finish("ranks' CPU generators are in no rank file");
  for (std::size_t i = 0; i < m.custom_objects; ++i)
    if (!catalog.has(custom_object_name(i)))
      problems.push_back(fmt::format("'{}' (registered object #{}) is in no rank file",
                                     custom_object_name(i), i));
  return problems;
}

}  // namespace accel::state
