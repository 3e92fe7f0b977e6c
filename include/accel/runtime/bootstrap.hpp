// What an Accelerator sets up before training: the device of this rank, and the process group
// of the job (none on one process).
#pragma once

#include <torch/torch.h>

#include <memory>

#include "../detail/error.hpp"
#include "environment.hpp"
#include "process_group.hpp"

namespace accel::runtime {

// cuda:<local rank> where CUDA is available, else the CPU.
inline torch::Device default_device(int local_rank) {
  if (torch::cuda::is_available())
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  return torch::Device(torch::kCPU);
}

// The group of this job's ranks on `device`, or null on one process.
inline std::unique_ptr<ProcessGroup> join_group(const Environment& env, const torch::Device& device,
                                                GroupSettings settings) {
  if (env.process.world_size == 1) return nullptr;
  if (device.is_cuda())
    detail::fail("{} processes on {}: multi-process training on CUDA needs NCCL, which this "
                 "version of accel does not wire yet; run the ranks on CPU "
                 "(Options{{.device = torch::kCPU}}) or one process per job",
                 env.process.world_size, device.str());
  return std::make_unique<ProcessGroup>(env, settings);
}

}  // namespace accel::runtime
