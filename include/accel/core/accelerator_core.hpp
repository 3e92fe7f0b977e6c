// What every Accelerator holds whatever its policies: where this process stands in the run, its
// process group, the objects prepare() registered, and the loop's counters. The Accelerator
// derives from it privately: its state is the class's own, not part of its surface, and the
// class names the three members it hands on (print, to_device, start_timeline). Its constructor
// and destructor are compiled once in the separately compiled mode (impl/accelerator_core.ipp);
// Accelerator<Par, Prec, Acc> (accelerator_class.hpp) adds the policies' behaviour and is what
// each variant instantiates, so that a variant compiles only what depends on its policies. What
// else does not depend on them is here too: print and to_device, the prepared loaders' protocol
// (member templates: a program of several variants instantiates each once per argument type,
// not once per variant), and profile() and the timeline (compiled once).
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "../data/tensor_tree.hpp"
#include "../detail/gradient_state.hpp"
#include "../detail/separate_compilation.hpp"
#include "../logging/logger.hpp"
#include "../options.hpp"
#include "../profiling/profile_scope.hpp"
#include "../profiling/recorder.hpp"
#include "../tracking/timeline.hpp"
#include "../runtime/environment.hpp"
#include "../runtime/process_group.hpp"
#include "../state/custom_objects.hpp"
#include "../state/loader_position.hpp"

namespace accel {
template <class, class>
class PreparedLoader;
template <class, class>
class PreparedStreamingLoader;
}

namespace accel::detail {

class AcceleratorCore {
 public:
  // fmt-formatted line on the main process only.
  template <class... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) const {
    if (process_.rank == 0) fmt::print("{}\n", fmt::format(format, std::forward<Args>(args)...));
  }

  // Any aggregate of tensors, on this Accelerator's device.
  template <class T>
  T to_device(const T& value) const {
    return data::to_device(value, device_, options_.non_blocking);
  }

  // Starts the per-step timeline now, as Options::timeline does at construction (or replaces its
  // options): for a program that learns its FLOPs per sample or its device's peak only once the
  // Accelerator exists. Every rank calls it.
  ACCEL_DECL void start_timeline(TimelineOptions options);

 protected:
  // Reads the environment and joins the run's process group; then tunes the CPU heap
  // (Options::tune_cpu_heap, a lower default threshold where the strategy shards parameters),
  // checks that the checkpoint folder can be written and, when the program named one, makes it
  // this run's (state/folder_lock.hpp).
  ACCEL_DECL AcceleratorCore(Options options, int accumulation_steps, bool shards_parameters);
  ACCEL_DECL ~AcceleratorCore();
  AcceleratorCore(const AcceleratorCore&) = delete;
  AcceleratorCore& operator=(const AcceleratorCore&) = delete;

  // The prepared models' parameters, each once, in preparation and registration order.
  ACCEL_DECL std::vector<torch::Tensor> prepared_parameters() const;

  using PreHook = std::function<void(const std::filesystem::path&)>;
  // Appends `hook` to `hooks`, refusing an empty one; `call` names the registration in the error.
  ACCEL_DECL static void add_pre_hook(std::vector<PreHook>& hooks, PreHook hook,
                                      std::string_view call);

  // accelerator.profile(): the trace goes into options.output_dir, else the open run's folder
  // `run_dir` (the main process's, broadcast: `run_open` is the same on every rank), else
  // ./profile, made here; its time zero is rank 0's clock (one broadcast).
  ACCEL_DECL profiling::Profile start_profile(const ProfileOptions& options,
                                              const std::filesystem::path& run_dir, bool run_open);
  // The timeline's finished steps as rows to log, gathered from every rank (timeline.hpp), while
  // a run is open (`run_open`); outside one they are dropped. Every rank takes the same steps,
  // so that all of them call the all-gather or none does.
  ACCEL_DECL std::vector<profiling::TimelineRow> take_timeline_rows(bool run_open);

  // --- Called by the prepared loaders (prepared.hpp), whatever the policies ---------------------
  template <class, class>
  friend class accel::PreparedLoader;
  template <class, class>
  friend class accel::PreparedStreamingLoader;

  // A streaming loader's agreement on its next batch (prepared_stream.hpp): whether any rank
  // (`any`) or every rank has one, from this rank's `has_batch` (0 or 1). One all-reduce of one
  // integer, on the device the collectives use.
  std::int64_t agree_on_stream(std::int64_t has_batch, bool any) {
    if (group_ == nullptr) return has_batch;
    torch::Tensor value = torch::tensor({has_batch}, torch::kInt64).to(device_);
    group_->allreduce(value, any ? runtime::ReduceOp::max : runtime::ReduceOp::min);
    return value.item<std::int64_t>();
  }
  // How many batches a streaming loader agrees on ahead of the loop: the accumulation window,
  // and at least the batch in hand and the next (to know whether it is the epoch's last).
  int stream_lookahead() const { return std::max(2, gradients_.accumulation_steps()); }

  // A prepared loader's slot in loaders_ (the same loader prepared twice: the same slot).
  template <class Loader>
  std::size_t register_loader(Loader& loader) {
    for (std::size_t i = 0; i < loaders_.size(); ++i)
      if (loaders_[i].identity == &loader) return i;
    loaders_.push_back(state::loader_position(loader));
    return loaders_.size() - 1;
  }

  // A prepared loader's iteration begins epoch `epoch`: returns how many of its batches to pass
  // over (skip_first_batches, or a loaded checkpoint's position).
  std::int64_t on_epoch_begin(std::size_t loader, std::int64_t epoch, std::int64_t batches) {
    state::LoaderPosition& position = loaders_[loader];
    position.epoch = epoch;
    position.batches = batches;
    position.consumed = std::exchange(position.skip, 0);
    return position.consumed;
  }
  void skip_first_batches(std::size_t loader, std::int64_t batches) {
    loaders_[loader].skip = batches;
  }

  // A loader yielded this rank's batch `index` of `count`; `real_in_final_round` is how many
  // samples of the last round are not wrap-around duplicates (-1: none are). Evaluation loops
  // run under torch::NoGradGuard and do not count as micro-steps.
  template <class Batch>
  Batch on_batch(std::size_t loader, const Batch& batch, std::int64_t index, std::int64_t count,
                 std::int64_t real_in_final_round) {
    loaders_[loader].consumed = index + 1;
    if (torch::GradMode::is_enabled()) gradients_.begin_micro_step(count - index, index == 0);
    end_of_data_ = index + 1 == count;
    real_in_final_round_ = real_in_final_round;
    return to_device(batch);
  }
  // A loader's epoch ran out: a backward() after it is no longer part of its last batch.
  void on_epoch_end() {
    if (torch::GradMode::is_enabled()) gradients_.end_micro_step();
  }
  // A prepared loader is about to serve a batch (an epoch's first included): with autograd on,
  // the training loop stands between two batches, where Options::checkpoints' periodic saves
  // happen (state/automatic_checkpoints.hpp, which sets step_boundary_).
  void on_step_boundary() {
    if (step_boundary_ && torch::GradMode::is_enabled()) step_boundary_();
  }

  Options options_;
  runtime::Environment environment_;
  runtime::ProcessInfo process_;
  logging::Logger logger_;  // accelerator.logger(): no name, this process's rank
  torch::Device device_;
  std::unique_ptr<runtime::ProcessGroup> group_;
  GradientState gradients_;
  std::vector<std::shared_ptr<torch::nn::Module>> models_;
  std::vector<torch::optim::Optimizer*> optimizers_;  // prepared, in order
  std::vector<torch::optim::LRScheduler*> schedulers_;
  bool end_of_data_ = false;
  std::int64_t real_in_final_round_ = -1;
  std::vector<state::LoaderPosition> loaders_;  // per prepared loader, in preparation order
  std::vector<state::CustomObject> custom_objects_;
  // Called with the checkpoint folder before save_state() writes and load_state() reads, in
  // registration order (register_save_state_pre_hook, register_load_state_pre_hook).
  std::vector<PreHook> save_state_pre_hooks_;
  std::vector<PreHook> load_state_pre_hooks_;
  std::int64_t completed_steps_ = 0;
  std::uint64_t counted_micro_step_ = 0;
  // The micro-step whose backward() completed a window not yet stepped or zeroed by a prepared
  // optimizer (Accelerator::check_last_window_used).
  std::optional<std::uint64_t> unused_window_;
  // Spans' recorder (profiling/recorder.hpp): made by Options::timeline or the first profile().
  // Shared so that a Profile, which may outlive the Accelerator, can hold it weakly.
  std::shared_ptr<profiling::Recorder> recorder_;
  std::function<void()> step_boundary_;  // see on_step_boundary()
};

}  // namespace accel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/accelerator_core.ipp"
#endif
