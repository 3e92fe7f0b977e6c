// What a checkpoint may read and set of an Accelerator, as one list of references: internal, made
// only by the Accelerator's own save_state / load_state / save_model / load_model
// (accelerator_class.hpp) and handed to state::CheckpointIO (checkpoint_io.hpp) and the
// checkpoint components (components/). No program makes or keeps one.
//
// It replaces a friend that read the Accelerator's private members: what a checkpoint touches is
// this list and nothing else, and the list says which of them a load may change (the loaders'
// positions, the window, the step count, through the strategy its slices). This header is light
// (no safetensors, no JSON), since every Accelerator includes it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "../detail/gradient_state.hpp"
#include "custom_objects.hpp"
#include "loader_position.hpp"

namespace accel::state {

template <class Accel, class Strategy>
struct CheckpointView {
  using Accelerator = Accel;
  using PreHooks = std::vector<std::function<void(const std::filesystem::path&)>>;

  // Its public surface only: process_index(), num_processes(), options(), process_group(), the
  // policies, precision() / precision_state() / load_precision_state(), FullParameters.
  Accel& accelerator;
  // The checkpoint-slice role (parallel/contract.hpp): a load gives it slices and flat
  // gradients back, then calls after_state_loaded().
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
};

}  // namespace accel::state
