// The autocast state a checkpointed segment ran under (per device type: on or off, and the
// dtype), so that the backward's recompute, which runs outside the forward's autocast scope,
// computes in the same dtype as the forward did (Bf16 and Fp16 recompute bitwise alike).
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <array>

#include "../detail/torch_compat.hpp"

namespace accel::memory::detail {

class AutocastState {
 public:
  static AutocastState capture() {
    AutocastState state;
    for (std::size_t i = 0; i < device_types.size(); ++i) {
      state.enabled_[i] = accel::detail::autocast_enabled(device_types[i]);
      state.dtype_[i] = accel::detail::autocast_dtype(device_types[i]);
    }
    return state;
  }

  bool any_enabled() const { return enabled_[0] || enabled_[1]; }

 private:
  friend class ReplayAutocast;
  static constexpr std::array<c10::DeviceType, 2> device_types = {c10::DeviceType::CPU,
                                                                  c10::DeviceType::CUDA};
  std::array<bool, 2> enabled_ = {false, false};
  std::array<c10::ScalarType, 2> dtype_ = {c10::ScalarType::BFloat16, c10::ScalarType::Half};
};

// RAII: the captured state for a recompute, the state before it afterwards. Entered as a region
// of its own (nesting counted), so the cast-weight cache it fills is dropped when it ends, as
// torch.autocast does for its outermost region.
class ReplayAutocast {
 public:
  explicit ReplayAutocast(const AutocastState& captured)
      : before_(AutocastState::capture()), active_(captured.any_enabled()) {
    set(captured);
    if (active_) at::autocast::increment_nesting();
  }
  ~ReplayAutocast() {
    if (active_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set(before_);
  }
  ReplayAutocast(const ReplayAutocast&) = delete;
  ReplayAutocast& operator=(const ReplayAutocast&) = delete;

 private:
  static void set(const AutocastState& state) {
    for (std::size_t i = 0; i < AutocastState::device_types.size(); ++i) {
      accel::detail::set_autocast_enabled(AutocastState::device_types[i], state.enabled_[i]);
      accel::detail::set_autocast_dtype(AutocastState::device_types[i], state.dtype_[i]);
    }
  }
  AutocastState before_;
  bool active_;
};

}  // namespace accel::memory::detail
