// Autocast for a precision policy: an RAII guard that runs the ops inside it in the policy's
// compute dtype, and the cast that hands model outputs back in fp32. Fp32 compiles to nothing.
#pragma once

#include <torch/torch.h>

#include "../data/tensor_tree.hpp"
#include "../detail/error.hpp"
#include "../detail/torch_compat.hpp"
#include "../policy/precision.hpp"
#include "scalar_type.hpp"

namespace accel::precision {

// What autocast runs in: the policy's compute type, but bf16 under Fp8, whose Linear layers
// compute in fp8 on their own path (fp8_linear.hpp) while the rest runs in bf16, as
// TransformerEngine's layers do inside bf16 autocast.
constexpr policy::ComputeType autocast_type(policy::ComputeType compute) {
  return compute == policy::ComputeType::float8 ? policy::ComputeType::bfloat16 : compute;
}

// The primary template serves policies without autocast.
template <class Prec>
class Autocast {
 public:
  explicit Autocast(const torch::Device&) {}
};

template <class Prec>
  requires(Prec::autocast)
class Autocast<Prec> {
 public:
  explicit Autocast(const torch::Device& device)
      : device_type_(device.type()),
        was_enabled_(detail::autocast_enabled(device_type_)),
        previous_dtype_(detail::autocast_dtype(device_type_)) {
    detail::set_autocast_enabled(device_type_, true);
    detail::set_autocast_dtype(device_type_, to_scalar_type(autocast_type(Prec::compute)));
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    // The cast-weight cache lives for the outermost region only, as in torch.autocast.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    detail::set_autocast_enabled(device_type_, was_enabled_);
    detail::set_autocast_dtype(device_type_, previous_dtype_);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  c10::DeviceType device_type_;
  bool was_enabled_;
  c10::ScalarType previous_dtype_;
};

// Model outputs in fp32, so that losses and metrics computed from them are full precision.
template <class Prec, class T>
T outputs_to_fp32(T outputs) {
  if constexpr (!Prec::autocast) {
    return outputs;
  } else {
    return data::map_tensors(outputs, [](const torch::Tensor& t) {
      const bool reduced = t.scalar_type() == c10::ScalarType::BFloat16 ||
                           t.scalar_type() == c10::ScalarType::Half;
      return reduced ? t.to(c10::ScalarType::Float) : t;
    });
  }
}

}  // namespace accel::precision
