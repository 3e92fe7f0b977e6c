// What an Accelerator sets up before training: the device of this rank, and the process group
// of the job (none on one process).
#pragma once

#include <torch/torch.h>

#include <memory>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "environment.hpp"
#include "process_group.hpp"

namespace accel::runtime {

// cuda:<local rank> where CUDA is available, else the CPU.
ACCEL_DECL torch::Device default_device(int local_rank);

// The group of this job's ranks on `device`, or null on one process. On CUDA, the group's CUDA
// tensors travel over NCCL (nccl.hpp), where this libtorch has it.
ACCEL_DECL std::unique_ptr<ProcessGroup> join_group(const Environment& env,
                                                    const torch::Device& device,
                                                    GroupSettings settings);

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/bootstrap.ipp"
#endif
