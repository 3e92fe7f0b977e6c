// Every difference between the libtorch versions accel supports (1.13 and 2.x) lives here, each
// guard commented with what differs. Nothing else in accel tests TORCH_VERSION_*.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

namespace accel::detail {

inline constexpr bool torch_2 = TORCH_VERSION_MAJOR >= 2;

// Autocast state. 1.13 has one set of functions per device type (set_cpu_enabled,
// set_autocast_cpu_dtype, set_enabled for CUDA, ...); 2.x takes the device type as an argument
// (set_autocast_enabled(DeviceType, bool), set_autocast_dtype(DeviceType, ScalarType)).
inline bool autocast_enabled(c10::DeviceType device_type) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR > 2
  return at::autocast::is_autocast_enabled(device_type);
#else
  return device_type == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                              : at::autocast::is_cpu_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device_type, bool enabled) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR > 2
  at::autocast::set_autocast_enabled(device_type, enabled);
#else
  if (device_type == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

inline c10::ScalarType autocast_dtype(c10::DeviceType device_type) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR > 2
  return at::autocast::get_autocast_dtype(device_type);
#else
  return device_type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                              : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device_type, c10::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR > 2
  at::autocast::set_autocast_dtype(device_type, dtype);
#else
  if (device_type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace accel::detail
