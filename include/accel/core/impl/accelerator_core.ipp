// AcceleratorCore's members; accelerator_core.hpp includes this file in header-only mode.
#pragma once

#include <chrono>
#include <filesystem>
#include <system_error>
#include <unordered_set>

#include "../accelerator_core.hpp"
#include "../../detail/error.hpp"
#include "../../detail/small_tensor.hpp"
#include "../../profiling/span.hpp"
#include "../../tracking/timeline.hpp"
#include "../../runtime/bootstrap.hpp"
#include "../../runtime/cpu_heap.hpp"
#include "../../runtime/group_settings.hpp"
#include "../../state/folder_lock.hpp"
#include "../../state/rank_agreement.hpp"
#include "../../state/writable_folder.hpp"

namespace accel::detail {

ACCEL_DECL AcceleratorCore::AcceleratorCore(Options options, int accumulation_steps,
                                            bool shards_parameters)
    : options_(std::move(options)),
      environment_(runtime::read_environment()),
      process_(environment_.process),
      logger_("", process_.rank, options_.logging),
      device_(options_.device.value_or(runtime::default_device(process_.local_rank))),
      group_(runtime::join_group(
          environment_, device_,
          runtime::with_environment({options_.timeout, options_.rendezvous_timeout,
                                     options_.check_collectives, options_.shared_memory}))),
      gradients_(accumulation_steps) {
  if (options_.tune_cpu_heap && device_.is_cpu()) {
    // glibc refuses a threshold above 32 MiB (HEAP_MAX_SIZE / 2 on 64-bit).
    const std::size_t threshold = options_.cpu_heap_mmap_threshold.value_or(
        shards_parameters ? std::size_t{8} << 20 : std::size_t{32} << 20);
    if (threshold < 4096 || threshold > (std::size_t{32} << 20))
      fail("Options::cpu_heap_mmap_threshold is {} bytes; use 4096 to 33554432 (32 MiB, the "
           "default)",
           threshold);
    runtime::keep_freed_cpu_memory(threshold);
  }
  const bool named_folder = options_.checkpoints.directory != CheckpointOptions{}.directory;
  state::check_checkpoint_folder_writable(options_.checkpoints.directory, named_folder);
  if (named_folder) {
    // The folder is this run's from now on (state/folder_lock.hpp): a second run on it stops
    // here, before it trains, and not at its first save. The main process takes it; every rank
    // learns the outcome (each program names a folder on every rank, or on none).
    const std::string error = state::detail::error_of([&] {
      if (process_.rank == 0) state::claim_checkpoint_folder(options_.checkpoints.directory);
    });
    const runtime::ProcessGroup::Caller caller(group_.get(), "Accelerator");
    state::detail::agree(group_.get(), error, "Options::checkpoints.directory");
  }
  if (options_.timeline.enabled) {
    profiling::check_timeline_options(options_.timeline);
    recorder_ = std::make_shared<profiling::Recorder>(process_.rank);
    recorder_->start_timeline();
  }
}

// A Profile still open ends here, its trace written, as its own end would have; the Profile
// then finds its recorder gone and does nothing. A destructor cannot throw: a failure to write
// is reported on stderr.
ACCEL_DECL AcceleratorCore::~AcceleratorCore() {
  if (!recorder_ || !recorder_->tracing()) return;
  try {
    recorder_->stop_trace();
  } catch (const std::exception& e) {
    fmt::print(stderr, "accel: warning: the Accelerator ended its open profile: {}\n",
               without_accel_prefix(e.what()));
  }
}

ACCEL_DECL profiling::Profile AcceleratorCore::start_profile(const ProfileOptions& options,
                                                             const std::filesystem::path& run_dir,
                                                             bool run_open) {
  std::filesystem::path folder = options.output_dir;
  torch::Tensor base_ns;
  {
    const profiling::Unrecorded unrecorded;  // its own broadcasts are no step's
    if (folder.empty() && run_open)
      folder = group_ ? std::filesystem::path(group_->broadcast_bytes(run_dir.string(), 0))
                      : run_dir;
    if (folder.empty()) folder = "profile";
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    if (error || !std::filesystem::is_directory(folder))
      fail("profile(): cannot create the trace folder {}: {}; choose a writable folder "
           "(ProfileOptions::output_dir)",
           folder.string(), error ? error.message() : "it is not a folder");
    base_ns = one_value(static_cast<std::int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count()));
    if (group_) group_->broadcast(base_ns, 0);
  }
  if (!recorder_) recorder_ = std::make_shared<profiling::Recorder>(process_.rank);
  recorder_->start_trace(options, folder / fmt::format("trace_rank{}.json", process_.rank),
                         base_ns.item<std::int64_t>());
  return profiling::Profile(recorder_);
}

ACCEL_DECL void AcceleratorCore::start_timeline(TimelineOptions options) {
  options.enabled = true;
  profiling::check_timeline_options(options);
  options_.timeline = options;
  if (!recorder_) recorder_ = std::make_shared<profiling::Recorder>(process_.rank);
  recorder_->start_timeline();
}

ACCEL_DECL std::vector<profiling::TimelineRow> AcceleratorCore::take_timeline_rows(bool run_open) {
  const profiling::Unrecorded unrecorded;
  const std::vector<profiling::StepTimes> mine = recorder_->take_steps();
  if (mine.empty() || !run_open) return {};
  return profiling::timeline_rows(profiling::gather_steps(group_.get(), mine), options_.timeline);
}

ACCEL_DECL std::vector<torch::Tensor> AcceleratorCore::prepared_parameters() const {
  std::vector<torch::Tensor> parameters;
  std::unordered_set<const void*> seen;
  for (const auto& module : models_)
    for (const auto& p : module->parameters())
      if (seen.insert(p.unsafeGetTensorImpl()).second) parameters.push_back(p);
  return parameters;
}

ACCEL_DECL void AcceleratorCore::add_pre_hook(std::vector<PreHook>& hooks, PreHook hook,
                                              std::string_view call) {
  if (!hook)
    fail("{}(): the hook is empty; pass a function taking the checkpoint folder, e.g. "
         "[](const std::filesystem::path& folder) {{ ... }}",
         call);
  hooks.push_back(std::move(hook));
}

}  // namespace accel::detail
