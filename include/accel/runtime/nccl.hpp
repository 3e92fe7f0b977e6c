// c10d's NCCL process group, for the collectives on CUDA tensors: built where libtorch was built
// with it, which a CUDA libtorch's CMake target says by defining USE_C10D_NCCL for its users (as
// the CPU target defines USE_C10D_GLOO). Elsewhere accel::runtime::has_nccl is false and a
// multi-process job on CUDA fails at start naming the reason (bootstrap.hpp).
//
// The ProcessGroup keeps its Gloo group for everything on the CPU (the store barrier, the byte
// collectives behind gather_object, the collective check) and sends CUDA tensors here. NCCL
// runs each collective on its own stream, ordered after the work already queued on the caller's
// current stream, and Work::wait() makes the current stream wait for it: the overlap with
// backward and the stream synchronization are c10d's, as under PyTorch's DDP.
#pragma once

#if defined(USE_C10D_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>

#include "../detail/torch_compat.hpp"

namespace accel::runtime {

#if defined(USE_C10D_NCCL)
inline constexpr bool has_nccl = true;

// The NCCL group of `rank` among `size` on CUDA device `device`, its rendezvous under its own
// prefix of `store`. NCCL's communicator is made at the group's first collective; `timeout` is
// how long a collective may wait for its peers before NCCL's watchdog fails it.
inline c10::intrusive_ptr<detail::CommBackend> make_nccl_backend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, c10::DeviceIndex device,
    std::chrono::milliseconds timeout) {
  c10::cuda::set_device(device);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(
      c10::make_intrusive<c10d::PrefixStore>("accel/nccl", store), rank, size, options);
}
#else
inline constexpr bool has_nccl = false;
#endif

}  // namespace accel::runtime
