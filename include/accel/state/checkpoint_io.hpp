// Accelerator::save_state / load_state / save_model / load_model (docs/how-to/resume.md): the
// orchestration. What is saved and loaded is the components' (components/component.hpp, the
// protocol: each piece's tensors and manifest part on save, its checks and staged values on
// load, the steps that copy them in); this file runs them in one order, and does what is no
// component's: the folder, the pre-hooks, the ranks' agreement (rank_agreement.hpp), writing the
// rank files and the one Manifest (manifest.hpp), committing. It reaches the Accelerator only
// through the CheckpointView the Accelerator hands it (checkpoint_view.hpp), which depends on the
// strategy alone: StateIO<Strategy> is all of it, and CheckpointIO<Accelerator> only points the
// view at its precision's state functions (PrecisionStateIO). save_model and load_model are
// model_files.hpp's.
//
// A checkpoint is a folder:
//   rank_<r>.safetensors   what rank r holds: its slices of the parameters and of the optimizer
//                          state, in the full tensors' numbering whatever the mesh
//                          (state/slice_catalog.hpp), its RNG states, mid-window its
//                          gradients, and on rank 0 the buffers and registered objects
//   manifest.json          written last by the main process: format version, accel and libtorch
//                          versions, world size and mesh, policies, every file's size and
//                          XXH3-64, the models' parameter names, shapes and dtypes, the
//                          optimizers' types and options, schedulers, loader positions, the
//                          window, step counters
// committed as state/checkpoint_folder.hpp describes. Loading is staged: every file is read and
// its checksum verified, and every value the live objects will take is built and checked, on
// every rank, before anything changes; the ranks then agree that all of them succeeded, and only
// then copy the values in.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../detail/error.hpp"
#include "../parallel/strategy.hpp"
#include "../precision/precision.hpp"
#include "../runtime/progress_record.hpp"
#include "../version.hpp"
#include "automatic_checkpoints.hpp"
#include "background_write.hpp"
#include "checkpoint_folder.hpp"
#include "checkpoint_io_declaration.hpp"
#include "checkpoint_view.hpp"
#include "checksum.hpp"
#include "components/component.hpp"
#include "components/loader_positions.hpp"
#include "components/model_slices.hpp"
#include "components/optimizer_slots.hpp"
#include "components/precision_and_objects.hpp"
#include "components/rng.hpp"
#include "components/schedulers.hpp"
#include "components/window.hpp"
#include "folder_lock.hpp"
#include "manifest.hpp"
#include "model_files.hpp"
#include "posix_file.hpp"
#include "rank_agreement.hpp"
#include "resume_choice.hpp"
#include "safetensors.hpp"
#include "slice_catalog.hpp"

namespace accel::state {

// The pieces of a checkpoint, in the order they write their tensors into a rank file and stage
// a load (the order of the apply steps too).
using CheckpointComponents =
    std::tuple<components::ModelSlices, components::OptimizerSlots, components::Schedulers,
               components::LoaderPositions, components::Rng, components::Window,
               components::PrecisionAndObjects>;

// save_state and load_state over one strategy's CheckpointView: compiled once per strategy in a
// translation unit, whatever precisions and accumulation counts its Accelerators have.
template <class Strategy>
struct StateIO {
  using Path = std::filesystem::path;
  using View = CheckpointView<Strategy>;

  // A check on accel's own components, which no user code reaches: not one of the `accel:`
  // messages (docs/concepts/policies.md) a program can meet.
  static_assert(components::all_components<CheckpointComponents, View>,
                "internal: a checkpoint component lacks add_tensors, describe, check or stage "
                "(state/components/component.hpp)");

  // --- save_state ----------------------------------------------------------------------------
  static Path save_state(const View& view, const std::optional<Path>& requested,
                         SaveMode mode = SaveMode::sync) {
    runtime::ProcessGroup* group = view.group;
    const runtime::ProcessGroup::Caller caller(group, "save_state");
    const int rank = view.rank;
    const Path root = view.options.checkpoints.directory;
    std::string target_text;
    bool under_root = false;
    // A background save under way ends first (one snapshot at a time), and its failure is this
    // call's, on every rank (the agreement below).
    std::string error = finish_background_save(view);
    if (error.empty()) error = detail::error_of([&] {
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
      run_pre_hooks(group, view.save_state_pre_hooks, saved, "save_state");
      const std::optional<Path> prune_root =
          under_root ? std::optional<Path>(resolved_folder(root)) : std::nullopt;
      if (mode == SaveMode::async && view.runner != nullptr)
        start_background_write(view, staging, target, prune_root);
      else
        write_and_commit(view, staging, target, prune_root);
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
  static Path load_state(const View& view, const std::optional<Path>& requested) {
    runtime::ProcessGroup* group = view.group;
    const runtime::ProcessGroup::Caller caller(group, "load_state");
    std::string chosen;
    std::string error = finish_background_save(view);  // it may be writing the newest checkpoint
    if (error.empty()) error = detail::error_of([&] {
      if (view.rank != 0) return;
      if (requested) {
        chosen = requested->string();
        return;
      }
      const Path root = view.options.checkpoints.directory;
      // Resuming from the root makes it this run's: another run still writing there would
      // otherwise be resumed from, and then written over.
      std::error_code absent;
      if (std::filesystem::is_directory(root, absent))
        hold_folder_for_this_run(resolved_folder(root), "load_state");
      // The newest, if the run that wrote it continued the one before it there.
      const auto newest = checkpoint_to_resume(root);
      if (!newest)
        accel::detail::fail("load_state: no committed checkpoint_<n> under '{}' (a folder "
                            "with {}); pass the folder to load_state(), or check "
                            "Options::checkpoints.directory",
                            root.string(), manifest_name);
      chosen = newest->string();
    });
    detail::agree(group, error, "load_state: finding the checkpoint");
    const Path folder = detail::broadcast_string(group, chosen);
    run_pre_hooks(group, view.load_state_pre_hooks, folder, "load_state");

    ApplySteps apply;
    error = detail::error_of([&] { apply = stage(view, folder); });
    detail::agree(group, error, "load_state");
    torch::NoGradGuard no_grad;
    for (auto& step : apply) step();
    view.strategy.after_state_loaded();
    if (view.rank == 0) runtime::record_resumed(view.completed_steps, folder.string());
    return folder;
  }

 private:
  // Each component in turn (CheckpointComponents' order).
  template <class F>
  static void for_each_component(F&& step) {
    std::apply([&](auto... component) { (step(component), ...); }, CheckpointComponents{});
  }

  // The user's pre-hooks, in registration order, on every rank; the ranks agree on the outcome,
  // so that a hook failing on one rank stops the call on all of them. They agree even without a
  // hook (one small gather per call): a rank that registered none still meets the others.
  static void run_pre_hooks(runtime::ProcessGroup* group, const typename View::PreHooks& hooks,
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

  // Every rank writes its file straight from the tensors, hashing it as it goes; the sizes and
  // checksums go to the main process's manifest, written last, before the commit.
  // Afterwards the checkpoints under `prune_root` are pruned to Options::checkpoints.total_limit.
  static void write_and_commit(const View& view, const Path& staging, const Path& target,
                               const std::optional<Path>& prune_root) {
    runtime::ProcessGroup* group = view.group;
    const int rank = view.rank;
    std::string record;
    std::string error = detail::error_of([&] {
      components::NamedTensors named;
      for_each_component([&](auto c) { decltype(c)::add_tensors(view, rank, named); });
      record = write_rank_file(staging, rank, named);
    });
    detail::agree(group, error, "save_state: writing the rank files");
    std::vector<std::string> records{record};
    if (group != nullptr) records = runtime::gather_object(group, record);

    error = detail::error_of([&] {
      if (rank != 0) return;
      Manifest manifest = manifest_of(view);
      for (const auto& r : records) manifest.files.push_back(nlohmann::json::parse(r));
      posix::write_file_synced(staging / manifest_name, manifest.text());
      commit_staging(staging, target, "save_state");
      runtime::record_committed(manifest.completed_steps, target.string());
      if (prune_root) prune_checkpoints(*prune_root, view.options.checkpoints.total_limit);
    });
    detail::agree(group, error, "save_state: committing");
  }

  // save_state(SaveMode::async): everything the write needs is taken here, on the calling
  // thread: this rank's tensors copied into the host snapshot and, on the main process, the
  // manifest. The background thread (background_write.hpp) then writes and commits without a
  // collective: c10d's and accel's shared-memory collectives issued from a second thread of a
  // rank would interleave with the training loop's, in another order on every rank. The ranks
  // meet through files in the staging folder instead.
  static void start_background_write(const View& view, const Path& staging, const Path& target,
                                     const std::optional<Path>& prune_root) {
    BackgroundSave& background = view.runner->background;
    const int rank = view.rank;
    SnapshotTensors snapshot;
    std::optional<Manifest> manifest;
    const std::string error = detail::error_of([&] {
      components::NamedTensors live;
      {
        const components::detail::KeepOnDevice device_tensors_copied_by_the_snapshot;
        for_each_component([&](auto c) { decltype(c)::add_tensors(view, rank, live); });
      }
      snapshot = background.snapshot().take(live);
      if (rank == 0) manifest = manifest_of(view);
    });
    detail::agree(view.group, error, "save_state: taking the snapshot");
    BackgroundWrite write{.staging = staging,
                          .target = target,
                          .rank = rank,
                          .world_size = view.world_size,
                          .prune_root = prune_root,
                          .total_limit = view.options.checkpoints.total_limit,
                          .manifest = std::move(manifest)};
    background.start([write = std::move(write), snapshot = std::move(snapshot),
                      &background](const std::atomic<bool>& abandon) {
      background.snapshot().wait_until_copied();
      write.run(snapshot, abandon);
    });
  }

  static std::string finish_background_save(const View& view) {
    return view.runner != nullptr ? view.runner->background.wait() : std::string();
  }

  // The main process's manifest: what the whole checkpoint was saved by, then each component's
  // part; the files' records are added by write_and_commit.
  static Manifest manifest_of(const View& view) {
    const int tensor_parallel = view.policies.tensor_parallel;
    Manifest manifest{.format_version = tensor_parallel > 1
                                            ? checkpoint_format_version
                                            : checkpoint_format_version_without_blocks,
                      .accel_version = fmt::format("{}.{}.{}", ACCEL_VERSION_MAJOR,
                                                   ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH),
                      .libtorch_version = fmt::format("{}.{}.{}", TORCH_VERSION_MAJOR,
                                                      TORCH_VERSION_MINOR, TORCH_VERSION_PATCH),
                      .world_size = view.world_size,
                      .tensor_parallel = tensor_parallel,
                      .parallelism = std::string(view.policies.parallelism),
                      .precision = std::string(view.policies.precision),
                      .accumulation_steps = view.policies.accumulation_steps,
                      .split_batches = view.options.split_batches,
                      .run_id = this_run_id(),
                      .resumed_from = resumed_from_run()};
    for_each_component([&](auto c) { decltype(c)::describe(view, manifest); });
    return manifest;
  }

  // Staged loading: everything checked, nothing changed; returns what changes it. The manifest
  // is read and checked first, each component refuses what the manifest alone shows, then every
  // rank file is read whole and checked against the manifest (the staged values may be views of
  // its bytes: the catalog lives as long as the steps that copy them in), and each component
  // stages its part.
  static ApplySteps stage(const View& view, const Path& folder) {
    const Manifest manifest = Manifest::read(folder, "load_state");
    try {
      const std::string where = (folder / manifest_name).string();
      for_each_component([&](auto c) { decltype(c)::check(view, manifest, where); });
      auto catalog =
          std::make_shared<SliceCatalog>(read_checkpoint_files(folder, manifest, "load_state"));
      ApplySteps apply{[catalog] {}};
      const components::Staging<View> staging{
          view, manifest, *catalog, where, folder, view.rank, apply};
      for_each_component([&](auto c) { decltype(c)::stage(staging); });
      // Applied last (the steps run in order): this process has continued that run, and its
      // saves say so (resume_choice.hpp).
      apply.push_back([run = manifest.run_id] { note_resumed_from_run(run); });
      return apply;
    } catch (const nlohmann::json::exception& e) {  // an optimizer's options, a precision's state
      accel::detail::fail("load_state: '{}' does not have the layout of format version {} ({})",
                          (folder / manifest_name).string(), manifest.format_version, e.what());
    }
  }
};

// The precision's state in a manifest, for one precision behaviour (precision::Precision<P>):
// what CheckpointView::describe_precision and stage_precision call.
template <class Precision>
struct PrecisionStateIO {
  static void describe(const Precision& behaviour, Manifest& manifest) {
    manifest.precision_state = behaviour.state();
  }
  static void stage(Precision& behaviour, const Manifest& manifest, ApplySteps& apply) {
    auto state = manifest.precision_state.template get<typename Precision::state_type>();
    behaviour.check_state(state);
    apply.push_back([&behaviour, state] { behaviour.load_state(state); });
  }
};

// Every Accelerator's checkpoints (checkpoint_io_declaration.hpp declares the primary template,
// which stops a call made without this header): StateIO for its strategy, the view's precision
// functions set for its precision.
template <class Accel>
struct CheckpointIO<Accel, void> {
  using Path = std::filesystem::path;
  using Strategy = parallel::Strategy<typename Accel::parallelism_policy>;
  using View = CheckpointView<Strategy>;
  using Precision = precision::Precision<typename Accel::precision_policy>;

  static Path save_state(View view, Precision& precision, const std::optional<Path>& folder,
                         SaveMode mode) {
    return StateIO<Strategy>::save_state(with_precision(std::move(view), precision), folder,
                                         mode);
  }
  static Path load_state(View view, Precision& precision, const std::optional<Path>& folder) {
    return StateIO<Strategy>::load_state(with_precision(std::move(view), precision), folder);
  }
  static void save_model(const View& view, torch::nn::Module& model, const Path& folder,
                         std::uint64_t max_shard_bytes) {
    save_model_files(view, model, folder, max_shard_bytes);
  }
  static void load_model(const View& view, torch::nn::Module& model, const Path& folder,
                         bool strict, DtypeConversion conversion) {
    load_model_files(view, model, folder, strict, conversion);
  }

 private:
  static View with_precision(View view, Precision& precision) {
    view.describe_precision = [&precision](Manifest& manifest) {
      PrecisionStateIO<Precision>::describe(precision, manifest);
    };
    view.stage_precision = [&precision](const Manifest& manifest, ApplySteps& apply) {
      PrecisionStateIO<Precision>::stage(precision, manifest, apply);
    };
    return view;
  }
};

}  // namespace accel::state
