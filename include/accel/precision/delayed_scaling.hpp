// Delayed scaling for one fp8 tensor (TransformerEngine's recipe): the scale a tensor is
// multiplied by before it is rounded to float8 comes from the amaxes (largest magnitudes) the
// tensor had in its last steps, not from this step's own, so that quantizing needs no pass over
// the tensor first:
//
//   quantize(x)   round_to_float8(x x scale) / scale, recording amax(x) for this step
//   update()      after a step: amax = the history's max (or its most recent value), and
//                 scale = FP8_MAX x 2^-margin / amax, kept as it was where amax is 0 or not
//                 finite; the history then moves on by one step
//
// The history and the scale are what a checkpoint saves (state()).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/small_tensor.hpp"
#include "../options.hpp"
#include "float8.hpp"

namespace accel::precision {

// What a checkpoint saves of one delayed-scaling tensor: its amax history, the current step's
// amax first, and its scale.
struct DelayedScalingState {
  std::vector<float> amax_history;
  float scale = 1.0f;

  // In a checkpoint's manifest (inside Fp8State's).
  template <class Json>
  friend void to_json(Json& json, const DelayedScalingState& state) {
    json = Json{{"scale", state.scale}, {"amax_history", state.amax_history}};
  }
  template <class Json>
  friend void from_json(const Json& json, DelayedScalingState& state) {
    state.amax_history = json.at("amax_history").template get<std::vector<float>>();
    state.scale = json.at("scale").template get<float>();
  }
};

inline void check_fp8_options(const Fp8Options& o) {
  if (o.amax_history_len < 1)
    detail::fail("Options::fp8.amax_history_len is {}; it must be at least 1 step (default 1024)",
                 o.amax_history_len);
  if (o.margin < 0)
    detail::fail("Options::fp8.margin is {}; it must be at least 0 (default 0)", o.margin);
}

class DelayedScaling {
 public:
  DelayedScaling(const Fp8Options& options, Float8Format format)
      : options_(options), format_(format) {
    check_fp8_options(options);
    history_ = torch::zeros({options.amax_history_len}, torch::kFloat);
  }

  // x rounded to the format through this tensor's scale, back in fp32; its amax is recorded for
  // this step (the largest of every call in the step).
  torch::Tensor quantize(const torch::Tensor& x) { return to_grid(x) / scale_; }

  // x x scale rounded to the format, in fp32: the values an fp8 tensor holds (a matmul of two
  // such is exact in fp32 but for the additions; its result times both 1/scale is the product's).
  // With record, x's amax is recorded for this step.
  torch::Tensor to_grid(const torch::Tensor& x, bool record = true) {
    torch::NoGradGuard no_grad;
    if (record && x.numel() > 0) {
      const torch::Tensor amax = x.detach().abs().max().to(torch::kFloat).cpu();
      history_[0] = torch::maximum(history_[0], amax);
    }
    return round_to_float8(x.to(torch::kFloat) * scale_, format_);
  }

  // This step's amax so far, and setting it: the ranks agree on the largest before update().
  float step_amax() const { return history_[0].item<float>(); }
  void set_step_amax(float amax) { history_[0] = amax; }

  // After a step: the scale from the history, then the history moves on (the oldest amax drops
  // out, the new step starts at 0).
  void update() {
    const float amax = options_.amax_compute_algo == AmaxAlgorithm::max
                           ? history_.max().item<float>()
                           : history_[0].item<float>();
    if (amax > 0.0f && std::isfinite(amax))
      scale_ = static_cast<float>(spec_of(format_).max / std::ldexp(1.0, options_.margin) /
                                  static_cast<double>(amax));
    history_ = torch::roll(history_, 1);
    history_[0] = 0.0f;
  }

  float scale() const { return scale_; }
  Float8Format format() const { return format_; }

  DelayedScalingState state() const {
    const torch::Tensor h = history_.contiguous();
    return {std::vector<float>(h.data_ptr<float>(), h.data_ptr<float>() + h.numel()), scale_};
  }
  void load_state(const DelayedScalingState& state) {
    check(state);
    history_ = accel::detail::values_tensor(state.amax_history);
    scale_ = state.scale;
  }
  // Whether load_state(state) would take it; an accel::Error naming what does not fit if not.
  void check(const DelayedScalingState& state) const {
    if (static_cast<std::int64_t>(state.amax_history.size()) != history_.numel())
      detail::fail("fp8 scaling state with an amax history of {} steps, and "
                   "Options::fp8.amax_history_len is {}; load it with the length it was saved "
                   "with",
                   state.amax_history.size(), history_.numel());
    if (!(state.scale > 0.0f) || !std::isfinite(state.scale))
      detail::fail("fp8 scaling state with scale {}; it must be positive and finite", state.scale);
  }

 private:
  Fp8Options options_;
  Float8Format format_;
  torch::Tensor history_;  // [amax_history_len], this step's amax first
  float scale_ = 1.0f;
};

}  // namespace accel::precision
