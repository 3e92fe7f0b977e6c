// Fp16: forward under autocast to fp16 (autocast.hpp), outputs handed back in fp32, dynamic loss
// scaling (dynamic_loss_scaling.hpp), since fp16's range loses small gradients.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "../detail/error.hpp"
#include "../detail/torch_compat.hpp"
#include "../options.hpp"
#include "../policy/precision.hpp"
#include "../runtime/process_group.hpp"
#include "dynamic_loss_scaling.hpp"
#include "precision.hpp"

namespace accel::precision {

template <>
struct Precision<Fp16> : DynamicLossScaling {
  void attach(runtime::ProcessGroup* group, const Options& options, const torch::Device& device) {
    // Refused at once rather than at the first matmul of the first forward.
    if (device.is_cpu() && !detail::cpu_has_half_matmul)
      detail::fail("Fp16 on CPU needs fp16 matmul and fp16 autocast on CPU, which libtorch {} "
                   "lacks (libtorch 2.x has them); use Bf16 on CPU (the same memory, and no loss "
                   "scaling needed), or Fp16 on a CUDA device",
                   TORCH_VERSION);
    attach_scaler(group, options, device);
  }
  void prepare_model(const std::shared_ptr<torch::nn::Module>& /*model*/,
                     const std::string& /*label*/) {}
};

}  // namespace accel::precision
