// What a process group is told before it starts: how long it may wait, whether it checks
// collectives, whether it may use shared memory, and where CUDA tensors go (accel::Options
// documents each), with the environment's overrides (ACCEL_TIMEOUT, ACCEL_RENDEZVOUS_TIMEOUT,
// ACCEL_CHECK_COLLECTIVES, ACCEL_SHARED_MEMORY) applied and checked, and MASTER_ADDR checked to
// resolve before anything waits on it.
#pragma once

#include <c10/core/Device.h>
#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "process.hpp"

namespace accel::runtime {

// How long the group may wait, and whether it checks collectives (accel::Options documents
// each; the environment overrides them: with_environment).
struct GroupSettings {
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(5);
  bool check_collectives = false;
  bool shared_memory = true;
  // The ranks' CUDA device when they train on CUDA: CUDA tensors then travel over NCCL.
  std::optional<c10::DeviceIndex> cuda_device = std::nullopt;
};

// A duration in seconds from the environment (fractions allowed), or `fallback` when unset.
ACCEL_DECL std::chrono::milliseconds env_seconds(const char* name,
                                                 std::chrono::milliseconds fallback);

// ACCEL_TIMEOUT and ACCEL_RENDEZVOUS_TIMEOUT (seconds) replace the timeouts, and
// ACCEL_CHECK_COLLECTIVES=1 turns checking on; timeouts must be positive.
ACCEL_DECL GroupSettings with_environment(GroupSettings settings);

// The host name MASTER_ADDR must resolve, or the rendezvous would retry until its timeout.
ACCEL_DECL void require_resolvable(const std::string& host, int port);

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/group_settings.ipp"
#endif
