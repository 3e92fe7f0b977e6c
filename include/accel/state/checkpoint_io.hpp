// Accelerator::save_state / load_state / save_model / load_model (docs/checkpoints.md).
//
// One file, longer than accel's headers should be: it still reaches into the Accelerator's
// members (a friend) for every component. The manifest is one type, written and read in
// manifest.hpp; loading stages component by component (stage_models, stage_optimizers, ...,
// each checking its part and appending the steps that copy it in). The precision writes and
// reads its own part (precision/contract.hpp, to_json / from_json); the strategy's part is its
// checkpoint-slice role (parallel/contract.hpp).
//
// A checkpoint is a folder:
//   rank_<r>.safetensors   what rank r holds: its slices of the parameters and of the optimizer
//                          state (state/slice_catalog.hpp), its RNG states, mid-window its
//                          gradients, and on rank 0 the buffers and registered objects
//   manifest.json          written last by the main process: format version, accel and libtorch
//                          versions, world size, policies, every file's size and XXH3-64, the
//                          models' parameter names, shapes and dtypes, the optimizers' types and
//                          options, schedulers, loader positions, the window, step counters
// committed as state/checkpoint_folder.hpp describes. Loading is staged: every file is read and
// its checksum verified, and every value the live objects will take is built and checked, on
// every rank, before anything changes; the ranks then agree that all of them succeeded, and only
// then copy the values in.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../accelerator_class.hpp"
#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/shape_text.hpp"
#include "../detail/torch_compat.hpp"
#include "../version.hpp"
#include "checkpoint_folder.hpp"
#include "checksum.hpp"
#include "folder_lock.hpp"
#include "manifest.hpp"
#include "optimizer_state.hpp"
#include "posix_file.hpp"
#include "safetensors.hpp"
#include "slice_catalog.hpp"
#include "weights.hpp"
#include "weights_reader.hpp"

namespace accel::state {


namespace detail {


// torch::optim::LRScheduler keeps its step count protected; a checkpoint must read and set it.
struct SchedulerAccess : torch::optim::LRScheduler {
  static unsigned& step_count(torch::optim::LRScheduler& scheduler) {
    return scheduler.*(&SchedulerAccess::step_count_);
  }
};

inline std::string libtorch_version() {
  return fmt::format("{}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
}

ACCEL_DECL torch::Tensor bytes_tensor(const std::string& bytes);
ACCEL_DECL std::string tensor_bytes(const torch::Tensor& t);

ACCEL_DECL std::vector<torch::Generator> generators();

// Every rank's outcome of a step that may fail on some ranks only: all of them learn of the
// first failure and throw it, so that no rank goes on alone (into a collective the others never
// reach, or applying a checkpoint the others refused).
ACCEL_DECL void agree(runtime::ProcessGroup* group, const std::string& error, const char* what);
template <class F>
std::string error_of(F&& step) {
  try {
    step();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}


ACCEL_DECL std::string broadcast_string(runtime::ProcessGroup* group, const std::string& value);

}  // namespace detail

// Every Accelerator's checkpoints (accelerator_class.hpp declares the primary template, which stops a call
// made without this header).
template <class Accel>
struct CheckpointIO<Accel, void> {
  using Path = std::filesystem::path;

  // --- save_state ----------------------------------------------------------------------------
  static Path save_state(Accel& acc, const std::optional<Path>& requested) {
    runtime::ProcessGroup* group = acc.group_.get();
    const runtime::ProcessGroup::Caller caller(group, "save_state");
    const int rank = acc.process_index();
    const Path root = acc.options_.checkpoints.directory;
    std::string target_text;
    bool under_root = false;
    std::string error = detail::error_of([&] {
      if (rank != 0) return;
      // The root is locked before the next number is chosen: two runs never pick the same one.
      const Path resolved_root = resolved_folder(root);
      if (!requested || resolved_folder(*requested).parent_path() == resolved_root) {
        hold_folder_for_this_run(resolved_root, "save_state");
        under_root = true;
      }
      const Path target = resolved_folder(requested ? *requested : next_automatic_checkpoint(root));
      begin_staging(target, "save_state");
      target_text = target.string();
    });
    detail::agree(group, error, "save_state: preparing the folder");
    const Path target = detail::broadcast_string(group, target_text);
    const Path staging = staging_folder(target);
    const Path saved = requested ? *requested : root / target.filename();
    try {
      run_pre_hooks(group, acc.save_state_pre_hooks_, saved, "save_state");
      write_and_commit(acc, staging, target,
                       under_root ? std::optional<Path>(resolved_folder(root)) : std::nullopt);
    } catch (...) {
      // A failed save (a full disk, a rank that could not write) leaves no rank's file behind:
      // they are what keeps the disk full.
      std::error_code ignored;
      if (rank == 0 && !why_not_staging(staging)) std::filesystem::remove_all(staging, ignored);
      throw;
    }
    return saved;
  }

  // --- load_state ----------------------------------------------------------------------------
  static Path load_state(Accel& acc, const std::optional<Path>& requested) {
    runtime::ProcessGroup* group = acc.group_.get();
    const runtime::ProcessGroup::Caller caller(group, "load_state");
    std::string chosen;
    std::string error = detail::error_of([&] {
      if (acc.process_index() != 0) return;
      if (requested) {
        chosen = requested->string();
        return;
      }
      const Path root = acc.options_.checkpoints.directory;
      // Resuming from the root makes it this run's: another run still writing there would
      // otherwise be resumed from, and then written over.
      std::error_code absent;
      if (std::filesystem::is_directory(root, absent))
        hold_folder_for_this_run(resolved_folder(root), "load_state");
      const auto newest = newest_committed_checkpoint(root);
      if (!newest)
        accel::detail::fail("load_state: no committed checkpoint_<n> under '{}' (a folder "
                            "with {}); pass the folder to load_state(), or check "
                            "Options::checkpoints.directory",
                            root.string(), manifest_name);
      chosen = newest->string();
    });
    detail::agree(group, error, "load_state: finding the checkpoint");
    const Path folder = detail::broadcast_string(group, chosen);
    run_pre_hooks(group, acc.load_state_pre_hooks_, folder, "load_state");

    std::vector<std::function<void()>> apply;
    error = detail::error_of([&] { apply = stage(acc, folder); });
    detail::agree(group, error, "load_state");
    torch::NoGradGuard no_grad;
    for (auto& step : apply) step();
    acc.strategy_.after_state_loaded();
    return folder;
  }

  // The user's pre-hooks, in registration order, on every rank; the ranks agree on the outcome,
  // so that a hook failing on one rank stops the call on all of them. They agree even without a
  // hook (one small gather per call): a rank that registered none still meets the others.
  static void run_pre_hooks(runtime::ProcessGroup* group,
                            const std::vector<std::function<void(const Path&)>>& hooks,
                            const Path& folder, const char* call) {
    std::size_t running = 0;
    std::string error = detail::error_of([&] {
      for (; running < hooks.size(); ++running) hooks[running](folder);
    });
    if (!error.empty())
      error = fmt::format("accel: {}: pre-hook #{} (of {}, in registration order) failed for "
                          "'{}': {}",
                          call, running + 1, hooks.size(), folder.string(), error);
    detail::agree(group, error, fmt::format("{}: a pre-hook", call).c_str());
  }

  // --- save_model / load_model ---------------------------------------------------------------
  static void save_model(Accel& acc, torch::nn::Module& model, const Path& folder,
                         std::uint64_t max_shard_bytes) {
    const runtime::ProcessGroup::Caller caller(acc.group_.get(), "save_model");
    std::string error;
    {
      typename Accel::FullParameters full(acc, model);
      error = detail::error_of([&] {
        if (!acc.is_main_process()) return;
        std::vector<std::pair<std::string, torch::Tensor>> named;
        for (const auto& item : model.named_parameters())
          named.emplace_back(item.key(), item.value().detach().to(torch::kCPU));
        for (const auto& item : model.named_buffers())
          named.emplace_back(item.key(), item.value().detach().to(torch::kCPU));
        std::filesystem::create_directories(folder);
        save_weights(folder, named, max_shard_bytes);
      });
    }
    detail::agree(acc.group_.get(), error, "save_model");
  }

  // Each rank reads, by positioned reads (weights_reader.hpp), only what it keeps: under a
  // sharded strategy its slices of the parameters (and the buffers), under Ddp all of it. Names,
  // shapes and dtypes are checked on every rank (and the values that a check needs: a checked
  // dtype conversion, BOOL bytes), the ranks agree, and only then are the other values read, one
  // tensor at a time, each copied in as soon as it is read: a rank holds its shards and one
  // slice, never its shards twice (an empty build filled from a weights folder, docs/memory.md).
  // A read failing then (an I/O error: the sizes were checked when the folder was opened) leaves
  // the model partly loaded; the ranks agree on that error too.
  static void load_model(Accel& acc, torch::nn::Module& model, const Path& folder, bool strict,
                         DtypeConversion conversion) {
    const runtime::ProcessGroup::Caller caller(acc.group_.get(), "load_model");
    auto& strategy = acc.strategy_;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // checked values: into, from
    struct Later {
      const WeightsReader::Tensor* stored;
      torch::Tensor into;
      std::int64_t begin;
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
                      c10::ScalarType dtype, const torch::Tensor& into, std::int64_t begin)
          -> void {
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
          later.push_back({found, into, begin});
          return;
        }
        torch::Tensor value = weights.read(*found, begin, into.numel());
        if (conversion == DtypeConversion::checked) check_conversion(name, folder, value, dtype);
        copies.emplace_back(into, std::move(value));
      };
      for (const auto& item : model.named_parameters()) {
        const torch::Tensor& p = item.value();
        if (const auto slice = strategy.loaded_slice(p))
          read(item.key(), strategy.parameter_shape(p), p.scalar_type(), slice->data,
               slice->begin);
      }
      for (const auto& item : model.named_buffers()) {
        const torch::Tensor& b = item.value();
        read(item.key(), b.sizes().vec(), b.scalar_type(), b.view({-1}), 0);
      }
    });
    detail::agree(acc.group_.get(), error, "load_model");
    error = detail::error_of([&] {
      torch::NoGradGuard no_grad;
      for (auto& [into, from] : copies) into.copy_(from);
      copies.clear();
      for (const auto& item : later)
        item.into.copy_(opened->read(*item.stored, item.begin, item.into.numel()));
    });
    detail::agree(acc.group_.get(), error, "load_model: reading the values");
    strategy.after_state_loaded();
  }

 private:
  // DtypeConversion::checked: the same kind of number, and no finite value made infinite.
  static void check_conversion(const std::string& name, const Path& folder, const torch::Tensor& t,
                               c10::ScalarType to) {
    const c10::ScalarType from = t.scalar_type();
    if (from == to) return;
    const auto kind = [](c10::ScalarType type) {
      return type == torch::kBool                 ? "bool"
             : c10::isFloatingType(type)          ? "floating-point"
             : c10::isComplexType(type)           ? "complex"
                                                  : "integer";
    };
    const std::string_view fix = "pass accel::DtypeConversion::unchecked as load_model's fourth "
                                 "argument to convert it as torch's copy_ would";
    if (std::string_view(kind(from)) != kind(to))
      accel::detail::fail("load_model: '{}' in '{}' is {} ({}), the model's is {} ({}): another "
                          "kind of number, most often the wrong file; {}",
                          name, folder.string(), c10::toString(from), kind(from), c10::toString(to),
                          kind(to), fix);
    if (!c10::isFloatingType(from)) return;
    const torch::Tensor finite = torch::isfinite(t);
    const torch::Tensor overflow = finite & ~torch::isfinite(t.to(to));
    if (overflow.any().item<bool>())
      accel::detail::fail("load_model: '{}' in '{}' holds {} finite {} values beyond the range of "
                          "the model's {} (largest magnitude {:g}); they would become infinite; {}",
                          name, folder.string(), overflow.sum().item<std::int64_t>(),
                          c10::toString(from), c10::toString(to),
                          t.masked_select(finite).abs().max().item<double>(), fix);
  }

  // Every rank writes its file straight from the tensors, hashing it as it goes; the sizes and
  // checksums go to the main process's manifest, written last, before the commit.
  // Afterwards the checkpoints under `prune_root` are pruned to Options::checkpoints.total_limit.
  static void write_and_commit(Accel& acc, const Path& staging, const Path& target,
                               const std::optional<Path>& prune_root) {
    runtime::ProcessGroup* group = acc.group_.get();
    const int rank = acc.process_index();
    std::string record;
    std::string error = detail::error_of([&] {
      StreamingChecksum sum;
      const std::uint64_t bytes = safetensors::write_file(
          staging / rank_file_name(rank), rank_tensors(acc), {},
          [&sum](const void* data, std::size_t size) { sum.update(data, size); });
      record = nlohmann::json(FileRecord{rank_file_name(rank), bytes, checksum_hex(sum.value())})
                   .dump();
    });
    detail::agree(group, error, "save_state: writing the rank files");
    std::vector<std::string> records{record};
    if (group != nullptr) records = runtime::gather_object(group, record);

    error = detail::error_of([&] {
      if (rank != 0) return;
      Manifest manifest = manifest_of(acc);
      for (const auto& r : records) manifest.files.push_back(nlohmann::json::parse(r));
      posix::write_file_synced(staging / manifest_name, manifest.text());
      commit_staging(staging, target, "save_state");
      if (prune_root) prune_checkpoints(*prune_root, acc.options_.checkpoints.total_limit);
    });
    detail::agree(group, error, "save_state: committing");
  }

  // --- What one rank writes ------------------------------------------------------------------
  static std::vector<std::pair<std::string, torch::Tensor>> rank_tensors(Accel& acc) {
    const int rank = acc.process_index();
    auto& strategy = acc.strategy_;
    std::vector<std::pair<std::string, torch::Tensor>> named;
    auto cpu = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU).contiguous(); };
    for (std::size_t m = 0; m < acc.models_.size(); ++m) {
      const auto& model = *acc.models_[m];
      for (const auto& item : model.named_parameters())
        if (const auto slice = strategy.saved_slice(item.value(), rank))
          named.emplace_back(slice_name(model_tensor_name(m, item.key()), slice->begin), cpu(slice->data));
      if (rank == 0)
        for (const auto& item : model.named_buffers())
          named.emplace_back(slice_name(model_tensor_name(m, item.key()), 0),
                             cpu(item.value().reshape({-1})));
    }
    for (std::size_t o = 0; o < acc.optimizers_.size(); ++o) {
      torch::optim::Optimizer& user = *acc.optimizers_[o];
      const OptimizerKind kind = kind_of(user);
      if (kind == OptimizerKind::other) {
        if (rank != 0) continue;
        torch::serialize::OutputArchive archive;
        user.save(archive);
        std::ostringstream out;
        archive.save_to(out);
        named.emplace_back(optimizer_archive_name(o), detail::bytes_tensor(out.str()));
        continue;
      }
      for (const auto& slot : strategy.state_slots(user, /*saving=*/true, rank)) {
        const auto& state = slot.holder->state();
        const auto found = state.find(accel::detail::optimizer_state_key(slot.key));
        if (found == state.end()) continue;  // not stepped yet
        for (auto& [field, t] : param_state_tensors(kind, *found->second)) {
          const std::string base = state_tensor_name(o, slot.group, slot.index, field);
          if (field == "step")
            named.emplace_back(base, cpu(t));
          else
            named.emplace_back(slice_name(base, slot.begin), cpu(t));
        }
      }
    }
    const auto generators = detail::generators();
    for (std::size_t i = 0; i < generators.size(); ++i)
      named.emplace_back(rng_tensor_name(rank, i), generators[i].get_state());
    if (acc.gradients_.collecting()) {
      for (std::size_t m = 0; m < acc.models_.size(); ++m)
        for (const auto& item : acc.models_[m]->named_parameters())
          if (!strategy.is_flattened(item.value()) && item.value().grad().defined())
            named.emplace_back(gradient_tensor_name(rank, model_tensor_name(m, item.key())),
                               cpu(item.value().grad()));
      const auto flats = strategy.flat_gradients();
      for (std::size_t f = 0; f < flats.size(); ++f)
        if (flats[f].defined())
          named.emplace_back(gradient_tensor_name(rank, fmt::format("flat{}", f)), cpu(flats[f]));
    }
    if (rank == 0)
      for (std::size_t i = 0; i < acc.custom_objects_.size(); ++i)
        named.emplace_back(custom_object_name(i),
                           detail::bytes_tensor(acc.custom_objects_[i].save()));
    return named;
  }

  // --- The manifest (main process) -----------------------------------------------------------
  static Manifest manifest_of(Accel& acc) {
    Manifest manifest{.accel_version = fmt::format("{}.{}.{}", ACCEL_VERSION_MAJOR,
                                                   ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH),
                      .libtorch_version = detail::libtorch_version(),
                      .world_size = acc.num_processes(),
                      .parallelism = std::string(Accel::parallelism_policy::name),
                      .precision = std::string(Accel::precision_policy::name),
                      .accumulation_steps = Accel::accumulation_steps,
                      .split_batches = acc.options_.split_batches,
                      .completed_steps = acc.completed_steps_};
    for (const auto& model : acc.models_) {
      ModelRecord& record = manifest.models.emplace_back();
      for (const auto& item : model->named_parameters())
        record.parameters.push_back({item.key(), acc.strategy_.parameter_shape(item.value()),
                                     c10::toString(item.value().scalar_type())});
      for (const auto& item : model->named_buffers())
        record.buffers.push_back({item.key(), item.value().sizes().vec(),
                                  c10::toString(item.value().scalar_type())});
    }
    for (const auto* optimizer : acc.optimizers_) {
      const OptimizerKind kind = kind_of(*optimizer);
      OptimizerRecord& record = manifest.optimizers.emplace_back();
      record.type = std::string(kind_name(kind));
      for (const auto& group : optimizer->param_groups())
        record.groups.push_back({group.params().size(), options_json(kind, group.options())});
    }
    for (auto* scheduler : acc.schedulers_)
      manifest.scheduler_steps.push_back(detail::SchedulerAccess::step_count(*scheduler));
    for (const auto& position : acc.loaders_) {
      // An epoch served to its end resumes at the next one; before any iteration (since a
      // load), the position still to be skipped to.
      std::int64_t epoch = position.next_epoch(), consumed = position.skip;
      if (position.epoch >= 0) {
        consumed = position.consumed < position.batches ? position.consumed : 0;
        if (consumed > 0) epoch = position.epoch;
      }
      const std::int64_t global =
          acc.options_.split_batches ? consumed : consumed * acc.num_processes();
      manifest.loaders.push_back({epoch, consumed, global, position.samples, position.batch_size,
                                  position.shuffle, position.seed});
    }
    const auto window = acc.gradients_.saved();
    manifest.window = {window.window, window.position, window.collecting};
    // The precision's own to_json (precision/contract.hpp); {} where it has nothing to save.
    manifest.precision_state = acc.precision_state();
    manifest.custom_objects = acc.custom_objects_.size();
    return manifest;
  }

  // --- Staged loading: everything checked, nothing changed; returns what changes it ----------
  static std::vector<std::function<void()>> stage(Accel& acc, const Path& folder) {
    const Manifest manifest = Manifest::read(folder, "load_state");
    try {
      return stage_from(acc, folder, manifest);
    } catch (const nlohmann::json::exception& e) {  // an optimizer's options, a precision's state
      accel::detail::fail("load_state: '{}' does not have the layout of format version {} ({})",
                          (folder / manifest_name).string(), manifest.format_version, e.what());
    }
  }

  static std::vector<std::function<void()>> stage_from(Accel& acc, const Path& folder,
                                                       const Manifest& manifest) {
    const int rank = acc.process_index();
    const std::string where = (folder / manifest_name).string();
    const int saved_world = manifest.world_size;
    const WindowRecord& window = manifest.window;
    const bool mid_window = window.collecting;
    const std::string here = fmt::format("{} on {} processes", Accel::parallelism_policy::name,
                                         acc.num_processes());
    if (mid_window && (saved_world != acc.num_processes() ||
                       manifest.parallelism != Accel::parallelism_policy::name ||
                       manifest.accumulation_steps != Accel::accumulation_steps))
      accel::detail::fail("load_state: '{}' was saved mid-window (micro-step {} of {}) by {} on {} "
                          "processes with GradAccum<{}>; its collected gradients belong to that "
                          "layout, so load it with the same, not {} with GradAccum<{}> (or save at "
                          "the end of a window, when sync_gradients() is true)",
                          where, window.position, window.length, manifest.parallelism, saved_world,
                          manifest.accumulation_steps, here, Accel::accumulation_steps);
    if (manifest.precision != Accel::precision_policy::name && !manifest.precision_state.empty())
      accel::detail::fail("load_state: '{}' was saved under {} and this Accelerator is {}; the "
                          "precision's state (Fp16's loss scale, Fp8's scales) does not carry "
                          "over between them, so load it with {}",
                          where, manifest.precision, Accel::precision_policy::name,
                          manifest.precision);

    // Every rank file, read whole and checked against the manifest. The staged values may be
    // views of its bytes: the catalog lives as long as the steps that copy them in.
    auto owned_catalog =
        std::make_shared<SliceCatalog>(read_checkpoint_files(folder, manifest, "load_state"));
    SliceCatalog& catalog = *owned_catalog;
    std::vector<std::function<void()>> apply{[owned_catalog] {}};
    Staging staging{acc, manifest, catalog, where, folder, rank, apply};
    for (auto* stage : {&stage_models, &stage_optimizers, &stage_schedulers, &stage_loaders,
                        &stage_rng, &stage_window, &stage_precision_and_objects})
      stage(staging);
    return apply;
  }

  // What one component stages: its part of the checkpoint checked against the live objects, and
  // the steps that copy it in appended to `apply` (run only once every rank has staged all).
  struct Staging {
    Accel& acc;
    const Manifest& manifest;
    const SliceCatalog& catalog;
    const std::string& where;  // the manifest's path, for errors
    const Path& folder;
    int rank;
    std::vector<std::function<void()>>& apply;
  };

  // Models: parameters (this rank's slices) and buffers.
  static void stage_models(Staging& s) {
    Accel& acc = s.acc;
    const Manifest& manifest = s.manifest;
    const SliceCatalog& catalog = s.catalog;
    const std::string& where = s.where;
    auto& apply = s.apply;
    auto& strategy = s.acc.strategy_;
    const auto& models = manifest.models;
    if (models.size() != acc.models_.size())
      accel::detail::fail("load_state: '{}' holds {} models, {} are prepared; prepare the same "
                          "models, in the same order, before load_state()",
                          where, models.size(), acc.models_.size());
    for (std::size_t m = 0; m < acc.models_.size(); ++m) {
      auto& model = *acc.models_[m];
      std::vector<std::string> expected, saved;
      std::map<std::string, const TensorRecord*> described;
      for (const auto* list : {&models[m].parameters, &models[m].buffers})
        for (const TensorRecord& entry : *list) {
          saved.push_back(entry.name);
          described[entry.name] = &entry;
        }
      for (const auto& item : model.named_parameters()) expected.push_back(item.key());
      for (const auto& item : model.named_buffers()) expected.push_back(item.key());
      const NameCheck check = compare_names(expected, saved);
      if (!check.missing.empty() || !check.unexpected.empty())
        accel::detail::fail("load_state: model #{} in '{}' does not match prepared model #{}: {}",
                            m, where, m, check.describe());
      auto check_shape = [&](const std::string& name, const std::vector<std::int64_t>& shape,
                             c10::ScalarType dtype) {
        const TensorRecord& entry = *described.at(name);
        if (entry.shape != shape || entry.dtype != c10::toString(dtype))
          accel::detail::fail("load_state: '{}' of model #{} was saved as {} [{}], the live one is "
                              "{} [{}] ({})",
                              name, m, entry.dtype, accel::detail::shape_text(entry.shape),
                              c10::toString(dtype), accel::detail::shape_text(shape), where);
      };
      for (const auto& item : model.named_parameters()) {
        const torch::Tensor& p = item.value();
        check_shape(item.key(), strategy.parameter_shape(p), p.scalar_type());
        const auto slice = strategy.loaded_slice(p);
        if (!slice) continue;
        torch::Tensor value = catalog.read(model_tensor_name(m, item.key()), slice->begin,
                                           slice->data.numel(), p.scalar_type());
        apply.push_back([data = slice->data, value] { data.copy_(value); });
      }
      for (const auto& item : model.named_buffers()) {
        const torch::Tensor& b = item.value();
        check_shape(item.key(), b.sizes().vec(), b.scalar_type());
        torch::Tensor value =
            catalog.read(model_tensor_name(m, item.key()), 0, b.numel(), b.scalar_type()).view(b.sizes());
        apply.push_back([b, value] { b.copy_(value); });
      }
    }
  }

  // Optimizers: options of every param group, and the state this rank holds.
  static void stage_optimizers(Staging& s) {
    Accel& acc = s.acc;
    const Manifest& manifest = s.manifest;
    const SliceCatalog& catalog = s.catalog;
    const std::string& where = s.where;
    const int rank = s.rank;
    auto& apply = s.apply;
    auto& strategy = s.acc.strategy_;
    const auto& optimizers = manifest.optimizers;
    if (optimizers.size() != acc.optimizers_.size())
      accel::detail::fail("load_state: '{}' holds {} optimizers, {} are prepared", where,
                          optimizers.size(), acc.optimizers_.size());
    for (std::size_t o = 0; o < acc.optimizers_.size(); ++o) {
      torch::optim::Optimizer& user = *acc.optimizers_[o];
      const OptimizerKind kind = kind_of(user);
      const auto& saved = optimizers[o];
      const std::string label = fmt::format("optimizer #{} in '{}'", o, where);
      if (saved.type != kind_name(kind))
        accel::detail::fail("load_state: {} is {}, the prepared one is {}", label, saved.type,
                            kind_name(kind));
      auto& groups = user.param_groups();
      const auto& saved_groups = saved.groups;
      if (saved_groups.size() != groups.size())
        accel::detail::fail("load_state: {} has {} param groups, the prepared one {}", label,
                            saved_groups.size(), groups.size());
      for (std::size_t g = 0; g < groups.size(); ++g) {
        const std::size_t count = saved_groups[g].parameters;
        if (count != groups[g].params().size())
          accel::detail::fail("load_state: param group {} of {} has {} parameters, the prepared "
                              "one {}",
                              g, label, count, groups[g].params().size());
        std::shared_ptr<torch::optim::OptimizerOptions> options = options_from_json(
            kind, groups[g].options(), saved_groups[g].options,
            fmt::format("param group {} of {}", g, label));
        apply.push_back([&group = groups[g], options] { group.set_options(options->clone()); });
      }
      if (kind == OptimizerKind::other) {
        auto archive = std::make_shared<torch::serialize::InputArchive>();
        std::istringstream in(detail::tensor_bytes(catalog.whole(optimizer_archive_name(o))));
        archive->load_from(in);
        apply.push_back([&user, archive] { user.load(*archive); });
        continue;
      }
      struct Staged {
        torch::optim::Optimizer* holder;
        decltype(accel::detail::optimizer_state_key(torch::Tensor())) key;
        std::shared_ptr<torch::optim::OptimizerParamState> state;
      };
      auto staged = std::make_shared<std::vector<Staged>>();
      std::vector<torch::optim::Optimizer*> holders;
      for (const auto& slot : strategy.state_slots(user, /*saving=*/false, rank)) {
        if (std::find(holders.begin(), holders.end(), slot.holder) == holders.end())
          holders.push_back(slot.holder);
        const std::string prefix = fmt::format("optimizer{}/{}/{}/", o, slot.group, slot.index);
        std::map<std::string, torch::Tensor> fields;
        for (const auto& base : catalog.sliced_under(prefix))
          fields[base.substr(prefix.size())] =
              catalog.read(base, slot.begin, slot.numel, slot.key.scalar_type());
        if (catalog.has(prefix + "step")) fields["step"] = catalog.whole(prefix + "step");
        if (fields.empty()) continue;  // the parameter had no state when saved
        const std::string name = fmt::format("state of parameter {} of param group {} of {}",
                                             slot.index, slot.group, label);
        std::shared_ptr<torch::optim::OptimizerParamState> state =
            make_param_state(kind, fields, slot.key.sizes(), slot.key.options(), name);
        staged->push_back({slot.holder, accel::detail::optimizer_state_key(slot.key),
                           std::move(state)});
      }
      apply.push_back([holders, staged] {
        for (auto* holder : holders) holder->state().clear();
        for (auto& s : *staged) s.holder->state()[s.key] = s.state->clone();
      });
    }
  }

  // Schedulers.
  static void stage_schedulers(Staging& s) {
    Accel& acc = s.acc;
    const Manifest& manifest = s.manifest;
    const std::string& where = s.where;
    auto& apply = s.apply;
    const auto& schedulers = manifest.scheduler_steps;
    if (schedulers.size() != acc.schedulers_.size())
      accel::detail::fail("load_state: '{}' holds {} LR schedulers, {} are prepared", where,
                          schedulers.size(), acc.schedulers_.size());
    for (std::size_t s = 0; s < acc.schedulers_.size(); ++s) {
      const unsigned count = schedulers[s];
      apply.push_back([scheduler = acc.schedulers_[s], count] {
        detail::SchedulerAccess::step_count(*scheduler) = count;
      });
    }
  }

  // Loaders: the same data, and where to continue in it.
  static void stage_loaders(Staging& s) {
    Accel& acc = s.acc;
    const Manifest& manifest = s.manifest;
    const std::string& where = s.where;
    auto& apply = s.apply;
    const int saved_world = s.manifest.world_size;
    const auto& loaders = manifest.loaders;
    if (loaders.size() != acc.loaders_.size())
      accel::detail::fail("load_state: '{}' holds {} data loader positions, {} loaders are "
                          "prepared",
                          where, loaders.size(), acc.loaders_.size());
    for (std::size_t l = 0; l < acc.loaders_.size(); ++l) {
      const auto& saved = loaders[l];
      auto& position = acc.loaders_[l];
      if (saved.samples != position.samples || saved.batch_size != position.batch_size ||
          saved.shuffle != position.shuffle || saved.seed != position.seed)
        accel::detail::fail("load_state: loader #{} was saved over {} samples in batches of {} "
                            "(shuffle {}, seed {}), the prepared one serves {} in batches of {} "
                            "(shuffle {}, seed {}); a resume continues the same data",
                            l, saved.samples, saved.batch_size, saved.shuffle, saved.seed,
                            position.samples,
                            position.batch_size, position.shuffle, position.seed);
      const std::int64_t epoch = saved.epoch, global = saved.global_batches_consumed;
      const int world = acc.num_processes();
      const std::int64_t per_rank = acc.options_.split_batches ? 1 : world;
      if (global % per_rank != 0)
        accel::detail::fail("load_state: loader #{} was saved {} batches into epoch {}, which {} "
                            "processes cannot split evenly; resume on {} processes, or from a "
                            "checkpoint at the end of an epoch",
                            l, global, epoch, world, saved_world);
      apply.push_back([&position, epoch, skip = global / per_rank] {
        position.set_epoch(epoch);
        position.skip = skip;
        position.epoch = -1;
        position.consumed = 0;
      });
    }
  }

  // RNG: rank r takes saved rank r's states (at another world size, ranks beyond keep theirs).
  static void stage_rng(Staging& s) {
    const SliceCatalog& catalog = s.catalog;
    const int rank = s.rank;
    auto& apply = s.apply;
    const int saved_world = s.manifest.world_size;
    if (rank < saved_world) {
      const auto generators = detail::generators();
      for (std::size_t i = 0; i < generators.size(); ++i) {
        const std::string name = rng_tensor_name(rank, i);
        if (!catalog.has(name)) continue;
        torch::Tensor value = catalog.whole(name);
        apply.push_back([generator = generators[i], value]() mutable {
          std::lock_guard<std::mutex> lock(generator.mutex());
          generator.set_state(value);
        });
      }
    }
  }

  // The window, and mid-window the gradients collected so far.
  static void stage_window(Staging& s) {
    Accel& acc = s.acc;
    const SliceCatalog& catalog = s.catalog;
    const int rank = s.rank;
    auto& apply = s.apply;
    auto& strategy = s.acc.strategy_;
    const WindowRecord& window = s.manifest.window;
    const bool mid_window = s.manifest.window.collecting;
    apply.push_back([&acc, window] {
      acc.gradients_.restore({window.length, window.position, window.collecting});
    });
    if (mid_window) {
      for (std::size_t m = 0; m < acc.models_.size(); ++m)
        for (const auto& item : acc.models_[m]->named_parameters()) {
          const std::string name = gradient_tensor_name(rank, model_tensor_name(m, item.key()));
          if (strategy.is_flattened(item.value()) || !catalog.has(name)) continue;
          torch::Tensor value = catalog.whole(name);
          apply.push_back([p = item.value(), value]() mutable {
            if (p.grad().defined())
              p.mutable_grad().copy_(value);
            else
              p.mutable_grad() = value.to(p.device()).clone();
          });
        }
      const auto flats = strategy.flat_gradients();
      std::vector<torch::Tensor> gradients(flats.size());
      for (std::size_t f = 0; f < flats.size(); ++f) {
        const std::string name = gradient_tensor_name(rank, fmt::format("flat{}", f));
        if (catalog.has(name)) gradients[f] = catalog.whole(name);
      }
      apply.push_back([&strategy, gradients] { strategy.restore_flat_gradients(gradients); });
    }
  }

  // The precision's state, read by its own from_json and checked by it; a checkpoint of a
  // precision with nothing to save ({}) leaves this one's as it was constructed. Then the step
  // count and the registered objects.
  static void stage_precision_and_objects(Staging& s) {
    Accel& acc = s.acc;
    const Manifest& manifest = s.manifest;
    const SliceCatalog& catalog = s.catalog;
    const std::string& where = s.where;
    const Path& folder = s.folder;
    auto& apply = s.apply;
    if (const auto& saved = manifest.precision_state; !saved.empty()) {
      using State = typename std::remove_cvref_t<decltype(acc.precision())>::state_type;
      auto state = saved.template get<State>();
      acc.precision().check_state(state);
      apply.push_back([&acc, state] { acc.load_precision_state(state); });
    }
    apply.push_back([&acc, steps = manifest.completed_steps] { acc.completed_steps_ = steps; });
    const std::size_t custom = manifest.custom_objects;
    if (custom != acc.custom_objects_.size())
      accel::detail::fail("load_state: '{}' holds {} registered objects, {} are registered; "
                          "register_for_checkpointing() the same objects, in the same order",
                          where, custom, acc.custom_objects_.size());
    for (std::size_t i = 0; i < custom; ++i)
      apply.push_back(acc.custom_objects_[i].stage(
          detail::tensor_bytes(catalog.whole(custom_object_name(i))),
          fmt::format("registered object #{} in '{}'", i, folder.string())));
  }
};

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/checkpoint_io.ipp"
#endif
