// Two roles of the precision contract (contract.hpp), loss-scaling hooks and state, for dynamic
// loss scaling (Fp16), with torch.amp.GradScaler's semantics:
//
//   backward()          the loss times the window's scale; the scale is fixed when a window's
//                       first micro-step begins, so all its micro-steps (and several backward()
//                       of one micro-step, as a GAN's) add gradients of one scale.
//   unscale             each optimizer's gradients on this rank divided by that scale once per
//                       window, before clipping (clip_grad_norm unscales every prepared
//                       optimizer) or at the latest in optimizer.step(); inf/nan looked for at
//                       the same time and combined across ranks (max), so that a sharded
//                       strategy's shards all count and every rank takes the same decision.
//   optimizer.step()    skipped when that optimizer's gradients held inf/nan anywhere: its
//                       parameters and state are untouched, optimizer_step_was_skipped() says so,
//                       and a prepared scheduler does not advance.
//   the update          once per window whatever the number of optimizers, as GradScaler.update()
//                       once per iteration: backoff if any stepping optimizer found inf/nan, else
//                       one more step towards growth_interval. The next window uses it.
//
// A specialization's attach() calls attach_scaler() (fp16.hpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../options.hpp"
#include "../runtime/any_rank.hpp"
#include "../runtime/process_group.hpp"
#include "grad_scaler.hpp"
#include "precision.hpp"

namespace accel::precision {

class DynamicLossScaling {
 public:
  using state_type = LossScaleState;

  // The options checked, the group the ranks agree over, the scale at Options' init_scale.
  void attach_scaler(runtime::ProcessGroup* group, const Options& options,
                     const torch::Device& device) {
    check_loss_scaling(options.loss_scaling);
    group_ = group;
    options_ = options.loss_scaling;
    native_ = has_native_amp_ops(device);
    device_ = device;
    load_state({static_cast<float>(options_.init_scale), 0});
  }

  void on_backward(WindowPosition position) {
    if (position.begins_window(last_micro_step_)) begin_window();
    last_micro_step_ = position.micro_step;
  }

  torch::Tensor scale_loss(const torch::Tensor& loss) const { return loss * window_start_.scale; }
  double loss_scale() const { return window_start_.scale; }

  template <class Strategy>
  void unscale(Strategy& strategy, torch::optim::Optimizer& optimizer) {
    Record& record = record_of(optimizer);
    if (record.window == window_) return;
    record.window = window_;
    record.found_inf = runtime::any_rank(
        group_, unscale_gradients(strategy.gradients_of(optimizer), window_start_.scale, native_));
  }

  template <class Strategy>
  bool may_step(Strategy& strategy, torch::optim::Optimizer& optimizer) {
    unscale(strategy, optimizer);
    Record& record = record_of(optimizer);
    if (record.stepped_window != window_) {
      record.stepped_window = window_;
      window_found_inf_ = window_found_inf_ || record.found_inf;
      // From the window's starting state each time: one update per window.
      state_ = updated(window_start_, window_found_inf_, options_, native_, device_);
      if (record.found_inf) ++skipped_steps_;
    }
    record.skipped = record.found_inf;
    return !record.skipped;
  }

  bool step_was_skipped() const {
    for (const auto& record : records_)
      if (record.skipped) return true;
    return false;
  }
  // Optimizer steps skipped since construction, for logs.
  std::int64_t skipped_steps() const { return skipped_steps_; }
  const LossScalingOptions& options() const { return options_; }

  // The scale and growth tracker the next window starts from.
  state_type state() const { return state_; }
  void check_state(const state_type& state) const {
    if (!(state.scale > 0.0f) || !std::isfinite(state.scale) || state.growth_tracker < 0)
      detail::fail("loss scale state {{scale {}, growth_tracker {}}}: the scale must be positive "
                   "and finite and the tracker at least 0; was it saved by another precision?",
                   state.scale, state.growth_tracker);
  }
  void load_state(const state_type& state) {
    check_state(state);
    state_ = state;
    begin_window();
  }

 private:
  struct Record {
    const torch::optim::Optimizer* optimizer = nullptr;
    std::uint64_t window = 0;          // the window its gradients were last unscaled in
    std::uint64_t stepped_window = 0;  // the window its step was last decided in
    bool found_inf = false;
    bool skipped = false;
  };

  void begin_window() {
    window_start_ = state_;
    window_found_inf_ = false;
    ++window_;
  }

  Record& record_of(const torch::optim::Optimizer& optimizer) {
    for (auto& record : records_)
      if (record.optimizer == &optimizer) return record;
    return records_.emplace_back(Record{&optimizer});
  }

  runtime::ProcessGroup* group_ = nullptr;
  LossScalingOptions options_;
  bool native_ = false;
  torch::Device device_ = torch::Device(torch::kCPU);
  state_type state_;         // where the next window starts
  state_type window_start_;  // what this window's losses are scaled by
  bool window_found_inf_ = false;
  std::uint64_t window_ = 0;  // windows begun, from 1
  std::uint64_t last_micro_step_ = 0;
  std::int64_t skipped_steps_ = 0;
  std::vector<Record> records_;
};

}  // namespace accel::precision
