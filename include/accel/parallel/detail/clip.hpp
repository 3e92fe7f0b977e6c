// Gradient clipping by the global norm, for every strategy: each contributes its part of the norm
// through reduce_norm (a replicated strategy holds all of it; a sharded one sums its shards').
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "../../detail/error.hpp"

namespace accel::parallel::detail {

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
  std::vector<torch::Tensor> parts;
  parts.reserve(grads.size());
  for (const auto& g : grads)
    if (g.numel() > 0)
      parts.push_back(is_max ? g.abs().max().to(torch::kDouble)
                             : g.to(torch::kDouble).abs().pow(norm_type).sum());
  const torch::Tensor local = parts.empty() ? torch::zeros({}, torch::kDouble)
                              : is_max      ? torch::stack(parts).max()
                                            : torch::stack(parts).sum();
  const double reduced = strategy.reduce_norm(local, is_max).template item<double>();
  const double total = is_max ? reduced : std::pow(reduced, 1.0 / norm_type);
  const double coefficient = max_norm / (total + 1e-6);
  if (apply && coefficient < 1.0) {
    torch::NoGradGuard no_grad;
    for (auto& g : grads) g.mul_(coefficient);
  }
  return total;
}


}  // namespace accel::parallel::detail
