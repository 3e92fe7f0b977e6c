// Every difference between the libtorch versions accel supports (1.13 and 2.x) lives here, each
// guard commented with what differs. Nothing else in accel tests TORCH_VERSION_*.
#pragma once

#include <ATen/autocast_mode.h>
// c10d's base classes only (ProcessGroup, on 2.x also Backend; Store, Work, ReduceOp): what
// accel's declarations name. The Gloo backend and the stores are included by the .ipp files that
// make them, so a training TU does not parse them (docs/dev/build-time.md).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

// c10d's Gloo header (runtime/impl/) is empty without USE_C10D_GLOO, which torch's CMake target
// defines.
#ifndef USE_C10D_GLOO
#error "accel: USE_C10D_GLOO is not defined; link the torch CMake target (find_package(Torch)) or define it"
#endif

// Version checks below compare against (major, minor).
#define ACCEL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace accel::detail {

// c10d's Backend split: from 2.0 ProcessGroupGloo (and NCCL) derive from c10d::Backend and no
// longer from c10d::ProcessGroup. Both bases declare the collectives accel calls.
#if ACCEL_TORCH_AT_LEAST(2, 0)
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif

// TCPStore (several nodes, or any launcher without a store folder): from 2.4 TCPStoreOptions
// asks for the libuv server by default, and a libtorch built without libuv (Debian 13's 2.6)
// then refuses every TCPStore ("use_libuv was requested but PyTorch was build without libuv
// support"). accel asks for the classic server, which every build has; 1.13 has no such field
// (tested by the field itself rather than a version, as it came in a 2.x between the two).
template <class StoreOptions>
void use_classic_tcp_store(StoreOptions& options) {
  if constexpr (requires { options.useLibUV; }) options.useLibUV = false;
}

// What Gloo lacks on 1.13 and has on 2.6 (measured on both; versions in between take the
// fallback, which is always correct): _reduce_scatter_base, _allgather_base, and bf16 in
// allreduce ("Invalid scalar type" on 1.13). runtime/wire_fallbacks.hpp fills each
// gap once.
inline constexpr bool gloo_has_reduce_scatter_base = ACCEL_TORCH_AT_LEAST(2, 6);
inline constexpr bool gloo_has_allgather_base = ACCEL_TORCH_AT_LEAST(2, 6);
inline constexpr bool gloo_has_bf16 = ACCEL_TORCH_AT_LEAST(2, 6);

// CPU kernels: fp16 matmul and fp16 CPU autocast ("addmm_impl_cpu_ not implemented for 'Half'"
// and "AutocastCPU only support Bfloat16" on 1.13); the AMP scaler ops
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_) run on CPU from 2.x.
inline constexpr bool cpu_has_half_matmul = ACCEL_TORCH_AT_LEAST(2, 6);
inline constexpr bool cpu_has_amp_scaler_ops = ACCEL_TORCH_AT_LEAST(2, 6);
// float8 dtypes (e4m3fn, e5m2) exist from 2.1; _scaled_mm is CUDA only on every version.
inline constexpr bool has_float8 = ACCEL_TORCH_AT_LEAST(2, 1);
// The float8 forward dtype (e4m3, PyTorch's Float8_e4m3fn) where this libtorch has it.
inline constexpr std::optional<c10::ScalarType> float8_e4m3_dtype =
#if ACCEL_TORCH_AT_LEAST(2, 1)
    c10::ScalarType::Float8_e4m3fn;
#else
    std::nullopt;
#endif
// The float8 gradient dtype (e5m2, PyTorch's Float8_e5m2) where this libtorch has it.
inline constexpr std::optional<c10::ScalarType> float8_e5m2_dtype =
#if ACCEL_TORCH_AT_LEAST(2, 1)
    c10::ScalarType::Float8_e5m2;
#else
    std::nullopt;
#endif

// libtorch's profiler events (profile/torch_ops.hpp): KinetoEvent reports microseconds
// (startUs, durationUs) on 1.13 and nanoseconds (startNs, durationNs) on the 2.x that dropped
// the former; tested by the member, as it changed in a 2.x between the two. Both count from the
// epoch of the system clock.
template <class Event>
std::int64_t profiler_event_start_ns(const Event& event) {
  if constexpr (requires { event.startNs(); })
    return static_cast<std::int64_t>(event.startNs());
  else
    return static_cast<std::int64_t>(event.startUs()) * 1000;
}
template <class Event>
std::int64_t profiler_event_duration_ns(const Event& event) {
  if constexpr (requires { event.durationNs(); })
    return static_cast<std::int64_t>(event.durationNs());
  else
    return static_cast<std::int64_t>(event.durationUs()) * 1000;
}

// fp8 tensor-core matmul, CUDA only: at::_scaled_mm(a, b, scale_a, scale_b, ...) -> out from
// 2.4 (before, the scales were optional arguments after out_dtype and it returned (out, amax)).
// a row-major, b column-major, float8 both (not both e5m2); out = (a scale_a)(b scale_b), fp32.
inline constexpr bool has_scaled_mm = ACCEL_TORCH_AT_LEAST(2, 4);
inline torch::Tensor scaled_mm(const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& scale_a, const torch::Tensor& scale_b) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  return at::_scaled_mm(a, b, scale_a, scale_b, std::nullopt, std::nullopt, torch::kFloat);
#else
  (void)a, (void)b, (void)scale_a, (void)scale_b;
  TORCH_CHECK(false, "accel: at::_scaled_mm is used from libtorch 2.4 on");
#endif
}

// Autocast state. 1.13 has one set of functions per device type (set_cpu_enabled,
// set_autocast_cpu_dtype, set_enabled for CUDA, ...); 2.4+ takes the device type as an argument
// (set_autocast_enabled(DeviceType, bool), set_autocast_dtype(DeviceType, ScalarType)) and
// deprecates the old names, which then fail a -Werror build.
inline bool autocast_enabled(c10::DeviceType device_type) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device_type);
#else
  return device_type == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                              : at::autocast::is_cpu_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device_type, bool enabled) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
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
#if ACCEL_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device_type);
#else
  return device_type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                              : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device_type, c10::ScalarType dtype) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device_type, dtype);
#else
  if (device_type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

// The key an optimizer keeps a parameter's state under: 1.13 spells the TensorImpl's address as a
// string, 2.x (from 2.1) keys by the address itself. Told apart by the map's own key type.
template <class Key = typename std::remove_cvref_t<
              decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type>
Key optimizer_state_key(const torch::Tensor& parameter) {
  if constexpr (std::is_same_v<Key, std::string>) {
    // As 1.13's c10::guts::to_string spells it (an ostream's pointer form).
    std::ostringstream text;
    text << static_cast<const void*>(parameter.unsafeGetTensorImpl());
    return text.str();
  } else
    return static_cast<Key>(parameter.unsafeGetTensorImpl());
}

}  // namespace accel::detail
