// Gradient clipping by the global norm, for every strategy: each contributes its part of the norm
// through reduce_norm (a replicated strategy holds all of it; a sharded one sums its shards').
// Clipping by value clamps each element of the same gradients, which needs no other rank.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <vector>

#include "../../detail/error.hpp"

namespace accel::parallel::detail {

// The share of a gradient's |g|^p this rank adds before reduce_norm combines the ranks': all of
// it, except where ranks that reduce_norm sums over hold the same gradient (tensor parallelism's
// replicated parameters, equal on every rank of a tensor-parallel group), which says so through
// norm_share so that such a gradient is counted once.
template <class Strategy>
double norm_share(const Strategy& strategy, const torch::Tensor& gradient) {
  if constexpr (requires { { strategy.norm_share(gradient) } -> std::convertible_to<double>; })
    return strategy.norm_share(gradient);
  else
    return 1.0;
}

// The global p-norm of the parameters' gradients (their max for p = infinity), combined
// across ranks by reduce_norm; with `apply`, the gradients are scaled so that it is at most
// max_norm. Mid-window the gradients are incomplete: only measured then.
template <class Strategy>
double clip_grad_norm(Strategy& strategy, const std::vector<torch::Tensor>& parameters,
                      double max_norm, double norm_type, bool apply) {
  if (!(max_norm > 0.0))
    accel::detail::fail("clip_grad_norm: max_norm is {}; it must be > 0", max_norm);
  if (!(norm_type > 0.0))
    accel::detail::fail("clip_grad_norm: norm_type is {}; it must be > 0 (or infinity)",
                        norm_type);
  // A sharded strategy hands over this rank's shard of the gradients; every rank reaches
  // reduce_norm, even one whose shard holds none of these parameters (it adds zero).
  std::vector<torch::Tensor> grads = strategy.gradients_to_clip(parameters);
  const bool is_max = std::isinf(norm_type);
  // Combined per device, then on the CPU: one small copy per device, and every rank reduces a
  // CPU tensor whatever devices its gradients are on (a shard may hold none of them, or be on
  // the CPU under Options::offload.parameters while the device is CUDA).
  const auto combine = [&](const torch::Tensor& stacked) {
    return is_max ? stacked.max() : stacked.sum();
  };
  std::vector<std::vector<torch::Tensor>> by_device;
  for (const auto& g : grads) {
    if (g.numel() == 0) continue;
    torch::Tensor part = is_max ? g.abs().max().to(torch::kDouble)
                                : g.to(torch::kDouble).abs().pow(norm_type).sum();
    if (const double share = norm_share(strategy, g); !is_max && share != 1.0) part.mul_(share);
    auto same = std::find_if(by_device.begin(), by_device.end(),
                             [&](const auto& parts) { return parts.front().device() == g.device(); });
    if (same == by_device.end()) same = by_device.insert(by_device.end(), std::vector<torch::Tensor>{});
    same->push_back(std::move(part));
  }
  std::vector<torch::Tensor> on_cpu{torch::zeros({}, torch::kDouble)};
  for (const auto& parts : by_device) on_cpu.push_back(combine(torch::stack(parts)).cpu());
  const torch::Tensor local = combine(torch::stack(on_cpu));
  const double reduced = strategy.reduce_norm(local, is_max).template item<double>();
  const double total = is_max ? reduced : std::pow(reduced, 1.0 / norm_type);
  const double coefficient = max_norm / (total + 1e-6);
  if (apply && coefficient < 1.0) {
    torch::NoGradGuard no_grad;
    for (auto& g : grads) g.mul_(coefficient);
  }
  return total;
}

// clip_grad_value's bound, checked before anything is unscaled: a refused call changes nothing.
inline void check_clip_value(double clip_value) {
  if (!(clip_value > 0.0))
    accel::detail::fail("clip_grad_value: clip_value is {}; it must be > 0 (gradients are "
                        "clamped to [-clip_value, clip_value])",
                        clip_value);
}

// Clamps every element of the parameters' gradients (this rank's shard of them under a sharded
// strategy) to [-clip_value, clip_value].
template <class Strategy>
void clip_grad_value(Strategy& strategy, const std::vector<torch::Tensor>& parameters,
                     double clip_value) {
  torch::NoGradGuard no_grad;
  for (auto& g : strategy.gradients_to_clip(parameters)) g.clamp_(-clip_value, clip_value);
}

// Multiplies the gradients clip_grad_norm would scale for these parameters by `factor`, on every
// rank (token-weighted accumulation divides a window's gradients by its token count this way).
// The parameters must be the prepared models': under a sharded strategy a parameter outside them
// has its gradient listed on one rank only.
template <class Strategy>
void scale_gradients(Strategy& strategy, const std::vector<torch::Tensor>& parameters,
                     double factor) {
  torch::NoGradGuard no_grad;
  for (auto& g : strategy.gradients_to_clip(parameters)) g.mul_(factor);
}

}  // namespace accel::parallel::detail
