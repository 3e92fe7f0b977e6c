// What a checkpoint may read and set of an Accelerator, as one list of references: internal, made
// only by the Accelerator's own save_state / load_state / save_model / load_model
// (accelerator_class.hpp) and handed to state::CheckpointIO (checkpoint_io.hpp) and the
// checkpoint components (components/). No program makes or keeps one.
//
// It replaces a friend that read the Accelerator's private members: what a checkpoint touches is
// this list and nothing else, and the list says which of them a load may change (the loaders'
// positions, the window, the step count, through the strategy its slices, the precision's
// state). This header is light (no safetensors, no JSON), since every Accelerator includes it.
//
// It depends on the strategy only, not on the Accelerator: the policies are names, and the
// precision is reached through two functions that CheckpointIO sets. So the checkpoint code is
// compiled once per strategy in a translation unit, however many precisions and accumulation
// counts its Accelerators combine it with: the examples' 32 variants compile it four times, not
// 32 (docs/dev/build-time.md).
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
struct CheckpointRunner;
// The steps a staged load runs once every rank has staged every part (components/component.hpp).
using ApplySteps = std::vector<std::function<void()>>;

// The Accelerator's policies, as a manifest records them and a load compares them.
struct CheckpointPolicies {
  std::string_view parallelism;
  std::string_view precision;
  int accumulation_steps = 1;
  // The mesh: the tensor-parallel degree (1 without tensor parallelism); the data-parallel
  // degree is the world size over it.
  int tensor_parallel = 1;
};

template <class Strategy>
struct CheckpointView {
  using PreHooks = std::vector<std::function<void(const std::filesystem::path&)>>;

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
  // The precision's state in the manifest (precision/contract.hpp's to_json / from_json), through
  // the Accelerator's precision behaviour (precision::Precision<P>). The view is compiled once
  // per strategy, for every precision, so it reaches the precision through these two, which
  // save_state and load_state set (checkpoint_io.hpp, where the precision's type is known):
  // describe writes its state into a manifest; stage reads it back from one, has the precision
  // check it, and appends the apply step that sets it. Empty for save_model and load_model.
  std::function<void(Manifest&)> describe_precision{};
  std::function<void(const Manifest&, ApplySteps&)> stage_precision{};
  // The background writer and the periodic saves' record (automatic_checkpoints.hpp).
  CheckpointRunner* runner = nullptr;
};

}  // namespace accel::state
