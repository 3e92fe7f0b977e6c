// default_device() and join_group(); bootstrap.hpp includes it in header-only mode.
#pragma once

#include "../bootstrap.hpp"
#include "../nccl.hpp"

namespace accel::runtime {

ACCEL_DECL torch::Device default_device(int local_rank) {
  if (torch::cuda::is_available())
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  return torch::Device(torch::kCPU);
}

ACCEL_DECL std::unique_ptr<ProcessGroup> join_group(const Environment& env,
                                                    const torch::Device& device,
                                                    GroupSettings settings) {
  if (env.process.world_size == 1) return nullptr;
  if (device.is_cuda()) {
    if (!has_nccl)
      accel::detail::fail("{} processes on {}: multi-process training on CUDA needs c10d's NCCL "
                          "group, and this libtorch was built without it (USE_C10D_NCCL "
                          "undefined); use a CUDA build of libtorch with NCCL (PyTorch's own "
                          "builds have it), run the ranks on CPU (Options{{.device = "
                          "torch::kCPU}}), or one process per job",
                          env.process.world_size, device.str());
    settings.cuda_device = device.index() < 0 ? static_cast<c10::DeviceIndex>(env.process.local_rank)
                                              : device.index();
  }
  return std::make_unique<ProcessGroup>(env, settings);
}

}  // namespace accel::runtime
