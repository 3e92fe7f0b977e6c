// What a checkpoint may read and set of an Accelerator, as one list of references: internal, made
// only by the Accelerator's own save_state / load_state / save_model / load_model
// (accelerator_class.hpp) and handed to state::CheckpointIO (checkpoint_io.hpp) and the
// checkpoint components (components/). No program makes or keeps one.
//
// It replaces a friend that read the Accelerator's private members: what a checkpoint touches is
// this list and nothing else, and the list says which of them a load may change (the loaders'
// positions, the window, the step count, through the strategy its slices, through
// stage_precision the precision's state). This header is light (no safetensors, no JSON), since
// every Accelerator includes it.
//
// It depends on the strategy only, not on the Accelerator: the policies are names, and the
// precision's state (whose type only the Accelerator knows) comes through two functions that
// CheckpointIO sets. So the checkpoint code is compiled once per strategy in a translation unit,
// however many precisions and accumulation counts its Accelerators combine it with: a program
// of the examples' 32 variants compiles it four times, not 32 (docs/benchmarks.md, "Test suite
// time").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "../detail/gradient_state.hpp"
#include "../options.hpp"
#include "custom_objects.hpp"
#include "loader_position.hpp"

namespace accel::runtime {
class ProcessGroup;
}

namespace accel::state {

struct Manifest;

// The Accelerator's policies, as a manifest records them and a load compares them.
struct CheckpointPolicies {
  std::string_view parallelism;
  std::string_view precision;
  int accumulation_steps = 1;
};

template <class Strategy>
struct CheckpointView {
  using PreHooks = std::vector<std::function<void(const std::filesystem::path&)>>;
  using ApplySteps = std::vector<std::function<void()>>;

  // Where this process stands and what it was asked for: the Accelerator's public surface.
  runtime::ProcessGroup* group;  // null on one process
  int rank;
  int world_size;
  const Options& options;
  CheckpointPolicies policies;
  // The checkpoint-slice role (parallel/contract.hpp): a load gives it slices and flat
  // gradients back, then calls after_state_loaded(); save_model gathers full parameters with it.
  Strategy& strategy;
  // What prepare() and register_for_checkpointing() registered, in order.
  const std::vector<std::shared_ptr<torch::nn::Module>>& models;
  const std::vector<torch::optim::Optimizer*>& optimizers;
  const std::vector<torch::optim::LRScheduler*>& schedulers;
  std::vector<LoaderPosition>& loaders;  // a load sets where each continues
  const std::vector<CustomObject>& custom_objects;
  // The accumulation window and the steps completed, both restored by a load.
  accel::detail::GradientState& window;
  std::int64_t& completed_steps;
  // register_save_state_pre_hook / register_load_state_pre_hook.
  const PreHooks& save_state_pre_hooks;
  const PreHooks& load_state_pre_hooks;
  // The precision's state (precision/contract.hpp: its to_json / from_json), set by
  // CheckpointIO: written into the manifest; read back from one, checked by the precision, with
  // the apply step that sets it appended.
  std::function<void(Manifest&)> describe_precision = {};
  std::function<void(const Manifest&, ApplySteps&)> stage_precision = {};
};

}  // namespace accel::state
