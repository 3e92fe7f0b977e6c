// The arithmetic of dynamic loss scaling, as torch.amp.GradScaler does it: the scale and its
// growth tracker, the update after a step, and unscaling gradients while looking for inf/nan.
// Each runs on PyTorch's own AMP kernels where the build has them (CUDA, and CPU from libtorch
// 2.x: detail::cpu_has_amp_scaler_ops) and as plain tensor code elsewhere, with the same
// results (tested against each other on libtorch 2.6).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/torch_compat.hpp"
#include "../options.hpp"

namespace accel::precision {

// What a checkpoint saves of a loss scaler (PyTorch's GradScaler.state_dict() has the same two
// values besides the options): the scale the next window multiplies its loss by, and how many
// steps in a row ran without inf/nan since the scale last changed.
struct LossScaleState {
  float scale = 65536.0f;
  std::int32_t growth_tracker = 0;
  bool operator==(const LossScaleState&) const = default;

  // In a checkpoint's manifest: {"scale": ..., "growth_tracker": ...}.
  template <class Json>
  friend void to_json(Json& json, const LossScaleState& state) {
    json = Json{{"scale", state.scale}, {"growth_tracker", state.growth_tracker}};
  }
  template <class Json>
  friend void from_json(const Json& json, LossScaleState& state) {
    state.scale = json.at("scale").template get<float>();
    state.growth_tracker = json.at("growth_tracker").template get<std::int32_t>();
  }
};

// Refuses knobs the scaler cannot work with, naming the value.
inline void check_loss_scaling(const LossScalingOptions& o) {
  if (!(o.init_scale > 0.0) || !std::isfinite(static_cast<float>(o.init_scale)))
    detail::fail("Options::loss_scaling.init_scale is {}; it must be positive and finite in fp32 "
                 "(PyTorch's default, 65536 = 2^16, is accel's too)",
                 o.init_scale);
  if (!(o.growth_factor > 1.0) || !std::isfinite(o.growth_factor))
    detail::fail("Options::loss_scaling.growth_factor is {}; it must be finite and > 1 (default 2)",
                 o.growth_factor);
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0))
    detail::fail("Options::loss_scaling.backoff_factor is {}; it must lie in (0, 1) (default 0.5)",
                 o.backoff_factor);
  if (o.growth_interval < 1)
    detail::fail("Options::loss_scaling.growth_interval is {}; it must be at least 1 step "
                 "(default 2000)",
                 o.growth_interval);
}

// Whether PyTorch's AMP kernels run on this device type in this build.
inline bool has_native_amp_ops(const torch::Device& device) {
  return device.is_cuda() || (device.is_cpu() && detail::cpu_has_amp_scaler_ops);
}

// The state after a step: on inf/nan the scale backs off and the tracker restarts; otherwise the
// tracker counts the step, and at growth_interval the scale grows (unless that overflows fp32)
// and the tracker restarts. native: through at::_amp_update_scale_ on `device`.
inline LossScaleState updated(LossScaleState state, bool found_inf, const LossScalingOptions& o,
                              bool native = false,
                              const torch::Device& device = torch::Device(torch::kCPU)) {
  if (native) {
    const auto on = torch::TensorOptions().device(device);
    torch::Tensor scale = torch::full({}, state.scale, on.dtype(torch::kFloat));
    torch::Tensor tracker = torch::full({}, state.growth_tracker, on.dtype(torch::kInt));
    const torch::Tensor found = torch::full({}, found_inf ? 1.0f : 0.0f, on.dtype(torch::kFloat));
    at::_amp_update_scale_(scale, tracker, found, o.growth_factor, o.backoff_factor,
                           o.growth_interval);
    return {scale.item<float>(), tracker.item<std::int32_t>()};
  }
  // The same operations, in the same precision, as PyTorch's kernels (fp32 scale times a double
  // factor, rounded to fp32).
  if (found_inf) return {static_cast<float>(state.scale * o.backoff_factor), 0};
  const std::int32_t successful = state.growth_tracker + 1;
  if (successful == o.growth_interval) {
    const auto grown = static_cast<float>(state.scale * o.growth_factor);
    return {std::isfinite(grown) ? grown : state.scale, 0};
  }
  return {state.scale, successful};
}

// Multiplies every gradient by 1/scale (in fp32, as GradScaler's inv_scale) in place and returns
// whether any of them holds an inf or a nan (before or after). native: through
// at::_amp_foreach_non_finite_check_and_unscale_, one call per device.
inline bool unscale_gradients(const std::vector<torch::Tensor>& grads, float scale,
                              bool native = false) {
  torch::NoGradGuard no_grad;
  const double inverse = 1.0 / static_cast<double>(scale);
  // Grouped by device: the native kernel takes the tensors of one device.
  std::map<std::string, std::vector<torch::Tensor>> by_device;
  for (const auto& g : grads)
    if (g.defined() && g.numel() > 0) by_device[g.device().str()].push_back(g);
  bool found = false;
  for (auto& [name, group] : by_device) {
    const auto on = torch::TensorOptions().device(group.front().device()).dtype(torch::kFloat);
    const torch::Tensor inv_scale = torch::full({}, static_cast<float>(inverse), on);
    if (native) {
      torch::Tensor found_inf = torch::zeros({}, on);
      at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf, inv_scale);
      found = found || found_inf.item<float>() != 0.0f;
    } else {
      std::vector<torch::Tensor> flags;
      flags.reserve(group.size());
      for (auto& g : group) {
        flags.push_back(torch::isfinite(g).all().logical_not());
        g.mul_(inv_scale);
      }
      found = found || torch::stack(flags).any().item<bool>();
    }
  }
  return found;
}

}  // namespace accel::precision
