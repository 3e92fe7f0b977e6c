// accel-launch checkpoint; checkpoint_tool.hpp includes it in header-only mode.
// Longer than accel's files should be: the four subcommands (inspect, verify, merge, diff) and
// the command line that picks them, over the same reading of a checkpoint folder.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "../../detail/error.hpp"
#include "../../detail/shape_text.hpp"
#include "../checkpoint_folder.hpp"
#include "../checkpoint_tool.hpp"
#include "../manifest.hpp"
#include "../safetensors.hpp"
#include "../slice_catalog.hpp"
#include "../weights.hpp"

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
  return catalog.read(name, 0, element_count(record.shape), *dtype).view(record.shape);
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

inline std::string byte_size_text(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (1ULL << 20)) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < (1ULL << 30)) return fmt::format("{:.1f} MiB", bytes / double(1ULL << 20));
  return fmt::format("{:.2f} GiB", bytes / double(1ULL << 30));
}

// "10GB", "500MB", "2GiB", "1000000": transformers' spelling of max_shard_size, and bytes.
inline std::uint64_t parse_byte_size(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit(end, text.data() + text.size() - end);
  static const std::pair<std::string_view, std::uint64_t> units[] = {
      {"", 1},         {"B", 1},         {"KB", 1000},     {"MB", 1000'000},
      {"GB", 1000'000'000}, {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30}};
  for (const auto& [name, scale] : units)
    if (error == std::errc() && unit == name && value > 0) return value * scale;
  accel::detail::fail("--max-shard-size '{}' is not a size; write bytes or a "
                      "number with KB, MB, GB (powers of 1000) or KiB, MiB, GiB, e.g. 5GB",
                      text);
}

}  // namespace detail

ACCEL_DECL std::string describe_checkpoint(const std::filesystem::path& folder) {
  const Manifest m = Manifest::read(folder, "checkpoint inspect");
  std::string text = fmt::format("checkpoint {}\n", folder.string());
  text += fmt::format("  format        accel-checkpoint version {} (accel {}, libtorch {})\n",
                      m.format_version, m.accel_version, m.libtorch_version);
  text += fmt::format("  saved by      {} + {} + GradAccum<{}> on {} process{}{}\n", m.parallelism,
                      m.precision, m.accumulation_steps, m.world_size,
                      m.world_size == 1 ? "" : "es", m.split_batches ? ", split_batches" : "");
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
        text += fmt::format("    {:<40} {:<9} [{}]{}\n", t.name, t.dtype,
                            accel::detail::shape_text(t.shape),
                            list == &model.buffers ? "  (buffer)" : "");
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

ACCEL_DECL std::vector<std::string> verify_checkpoint(const std::filesystem::path& folder) {
  Manifest m;
  try {
    m = Manifest::read(folder, "checkpoint verify");
  } catch (const Error& e) {
    return {e.what()};
  }
  std::vector<std::string> problems;
  std::set<std::string> named;
  for (const FileRecord& file : m.files) named.insert(file.name);
  for (int r = 0; r < m.world_size; ++r)
    if (!named.contains(rank_file_name(r)))
      problems.push_back(fmt::format("the manifest names no {} for rank {} of {}",
                                     rank_file_name(r), r, m.world_size));
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
  for (int r = 0; r < m.world_size; ++r)
    if (!catalog.has(rng_tensor_name(r, 0)))
      problems.push_back(fmt::format("'{}' (rank {}'s CPU generator) is in no rank file",
                                     rng_tensor_name(r, 0), r));
  for (std::size_t i = 0; i < m.custom_objects; ++i)
    if (!catalog.has(custom_object_name(i)))
      problems.push_back(fmt::format("'{}' (registered object #{}) is in no rank file",
                                     custom_object_name(i), i));
  return problems;
}

ACCEL_DECL void merge_checkpoint(const std::filesystem::path& folder,
                                 const std::filesystem::path& out, const MergeOptions& options) {
  const Manifest m = Manifest::read(folder, "checkpoint merge");
  if (options.model >= m.models.size())
    accel::detail::fail("checkpoint merge: --model {}: '{}' holds {} model{} (#0{})",
                        options.model, folder.string(), m.models.size(),
                        m.models.size() == 1 ? "" : "s",
                        m.models.size() > 1 ? fmt::format(" to #{}", m.models.size() - 1) : "");
  std::error_code error;
  if (std::filesystem::exists(out, error) &&
      (!std::filesystem::is_directory(out, error) || !std::filesystem::is_empty(out, error)))
    accel::detail::fail("checkpoint merge: '{}' exists and is not an empty folder; merge writes "
                        "only into a new or empty folder, so that it replaces nothing; choose "
                        "another",
                        out.string());
  const SliceCatalog catalog = read_checkpoint_files(folder, m, "checkpoint merge");
  const std::string where = folder.string();
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto* list : {&m.models[options.model].parameters, &m.models[options.model].buffers})
    for (const TensorRecord& t : *list)
      named.emplace_back(t.name, detail::whole_model_tensor(catalog, options.model, t, where));
  std::vector<std::pair<std::string, torch::Tensor>> state;
  if (options.optimizer)
    for (std::size_t o = 0; o < m.optimizers.size(); ++o)
      for (auto& entry : detail::whole_optimizer_state(catalog, o)) state.push_back(std::move(entry));
  std::filesystem::create_directories(out);
  save_weights(out, named, options.max_shard_bytes);
  if (options.optimizer) {
    detail::TemporaryFile file(out / "optimizer.safetensors");
    safetensors::write_file(file.path(), state, {{"format", "pt"}}, {});
    file.commit();
  }
}

ACCEL_DECL std::vector<TensorDifference> diff_checkpoints(const std::filesystem::path& a,
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
    TensorDifference row{name, torch::equal(x, y) ? "equal" : "differs"};
    if (row.status == "differs" && x.numel() > 0) {
      const torch::Tensor xd = x.to(torch::kDouble), yd = y.to(torch::kDouble);
      const torch::Tensor gap = (xd - yd).abs();
      row.max_abs = gap.max().item<double>();
      row.max_rel = (gap / yd.abs().clamp_min(1e-30)).max().item<double>();
    }
    rows.push_back(std::move(row));
  }
  for (const auto& [name, t] : tb)
    if (in_b.contains(name)) rows.push_back({name, "only in B"});
  return rows;
}

ACCEL_DECL int checkpoint_command(int argc, const char* const* argv) {
  static constexpr std::string_view usage =
      "usage: accel-launch checkpoint inspect DIR\n"
      "       accel-launch checkpoint verify DIR\n"
      "       accel-launch checkpoint merge DIR OUT [--max-shard-size SIZE] [--model M] "
      "[--optimizer]\n"
      "       accel-launch checkpoint diff A B\n"
      "\n"
      "Reads a folder save_state wrote, without the program that wrote it (docs/checkpoints.md).\n"
      "  inspect  step, world size, policies, tensors, optimizers, files and their checksums\n"
      "  verify   every checksum, and every parameter and optimizer slot covered exactly;\n"
      "           exits 1 and lists each problem when there is one\n"
      "  merge    the model's consolidated weights into OUT (new or empty), as save_model\n"
      "           writes them: model.safetensors, or shards of at most SIZE (default 10GiB;\n"
      "           5GB, 500MB, 2GiB, bytes) with model.safetensors.index.json; --model M picks\n"
      "           a model by prepare() order (default 0); --optimizer adds\n"
      "           optimizer.safetensors, each optimizer slot's state whole and flat\n"
      "  diff     tensor by tensor (models and optimizer state): equal, or the largest\n"
      "           absolute and relative difference; exits 1 when any differs\n";
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  auto usage_error = [&](const std::string& message) {
    std::fprintf(stderr, "accel-launch checkpoint: %s\n\n%.*s", message.c_str(),
                 static_cast<int>(usage.size()), usage.data());
    return 2;
  };
  if (args.empty()) return usage_error("which subcommand: inspect, verify, merge or diff?");
  if (args[0] == "-h" || args[0] == "--help") {
    std::fwrite(usage.data(), 1, usage.size(), stdout);
    return 0;
  }
  const std::string_view command = args[0];
  std::vector<std::string_view> positional;
  MergeOptions merge;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    const bool takes_value = arg == "--max-shard-size" || arg == "--model";
    if (takes_value && command != "merge")
      return usage_error(fmt::format("{} is merge's option, not {}'s", arg, command));
    if (takes_value && i + 1 == args.size())
      return usage_error(fmt::format("{} needs a value", arg));
    try {
      if (arg == "--max-shard-size") {
        merge.max_shard_bytes = detail::parse_byte_size(args[++i]);
      } else if (arg == "--model") {
        const std::string_view value = args[++i];
        const auto [end, error] =
            std::from_chars(value.data(), value.data() + value.size(), merge.model);
        if (error != std::errc() || end != value.data() + value.size())
          return usage_error(fmt::format("--model '{}' is not a model number (0, 1, ...)", value));
      } else if (arg == "--optimizer" && command == "merge") {
        merge.optimizer = true;
      } else if (arg.starts_with("-")) {
        return usage_error(fmt::format("unknown option '{}'", arg));
      } else {
        positional.push_back(arg);
      }
    } catch (const Error& e) {
      return usage_error(std::string(accel::detail::without_accel_prefix(e.what())));
    }
  }
  const std::size_t wanted = command == "merge" || command == "diff" ? 2 : 1;
  if (command != "inspect" && command != "verify" && command != "merge" && command != "diff")
    return usage_error(fmt::format("unknown subcommand '{}'", command));
  if (positional.size() != wanted)
    return usage_error(fmt::format("{} takes {} folder{}, not {}", command, wanted,
                                   wanted == 1 ? "" : "s", positional.size()));
  const std::filesystem::path first(positional[0]);
  try {
    if (command == "inspect") {
      std::fputs(describe_checkpoint(first).c_str(), stdout);
      return 0;
    }
    if (command == "verify") {
      const auto problems = verify_checkpoint(first);
      for (const auto& problem : problems) std::fprintf(stderr, "%s\n", problem.c_str());
      std::printf("%s: %s\n", first.c_str(),
                  problems.empty() ? "whole (every checksum and slice checked)"
                                   : fmt::format("{} problem{}", problems.size(),
                                                 problems.size() == 1 ? "" : "s")
                                         .c_str());
      return problems.empty() ? 0 : 1;
    }
    const std::filesystem::path second(positional[1]);
    if (command == "merge") {
      merge_checkpoint(first, second, merge);
      std::printf("%s: model #%zu's weights from %s\n", second.c_str(), merge.model, first.c_str());
      return 0;
    }
    std::size_t different = 0;
    for (const auto& row : diff_checkpoints(first, second)) {
      if (row.status == "equal") continue;
      ++different;
      if (row.status == "differs")
        std::printf("%-48s max abs %.6g  max rel %.6g\n", row.name.c_str(), row.max_abs,
                    row.max_rel);
      else
        std::printf("%-48s %s\n", row.name.c_str(), row.status.c_str());
    }
    std::printf("%zu tensor%s differ%s\n", different, different == 1 ? "" : "s",
                different == 1 ? "s" : "");
    return different == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}

}  // namespace accel::state
