// What every Accelerator holds whatever its policies: where this process stands in the run, its
// process group, the objects prepare() registered, and the loop's counters. Its constructor and
// destructor are compiled once in the separately compiled mode (impl/accelerator_core.ipp);
// Accelerator<Par, Prec, Acc> (accelerator_class.hpp) adds the policies' behaviour and is what
// each variant instantiates, so that a variant compiles only what depends on its policies.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "detail/gradient_state.hpp"
#include "detail/separate_compilation.hpp"
#include "logging/logger.hpp"
#include "options.hpp"
#include "profiling/recorder.hpp"
#include "runtime/environment.hpp"
#include "runtime/process_group.hpp"
#include "state/custom_objects.hpp"
#include "state/loader_position.hpp"

namespace accel::detail {

class AcceleratorCore {
 protected:
  // Reads the environment and joins the run's process group; then tunes the CPU heap
  // (Options::tune_cpu_heap, a lower default threshold where the strategy shards parameters)
  // and checks that the checkpoint folder can be written.
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

  // The folder accelerator.profile() writes into: `given`, else the open run's folder (the main
  // process's, broadcast: `run_open` is the same on every rank), else ./profile; made here.
  ACCEL_DECL std::filesystem::path profile_folder(const std::filesystem::path& given,
                                                  const std::filesystem::path& run_dir,
                                                  bool run_open);
  // Now on the system clock, as rank 0 read it (one broadcast): a profile's time zero.
  ACCEL_DECL std::int64_t profile_base_ns();

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
  bool trigger_ = false;
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
  std::unique_ptr<profiling::Recorder> recorder_;
};

}  // namespace accel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/accelerator_core.ipp"
#endif
