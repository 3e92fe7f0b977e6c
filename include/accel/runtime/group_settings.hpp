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
inline std::chrono::milliseconds env_seconds(const char* name, std::chrono::milliseconds fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(raw, &end);
  if (end == raw || *end != '\0' || !(seconds > 0) || seconds > 1e9)
    detail::fail("{}='{}' is not a positive number of seconds; set it to, for example, 600, or "
                 "unset it",
                 name, raw);
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
}

// ACCEL_TIMEOUT and ACCEL_RENDEZVOUS_TIMEOUT (seconds) replace the timeouts, and
// ACCEL_CHECK_COLLECTIVES=1 turns checking on; timeouts must be positive.
inline GroupSettings with_environment(GroupSettings settings) {
  settings.timeout = env_seconds("ACCEL_TIMEOUT", settings.timeout);
  settings.rendezvous_timeout = env_seconds("ACCEL_RENDEZVOUS_TIMEOUT", settings.rendezvous_timeout);
  settings.check_collectives = settings.check_collectives || env_int("ACCEL_CHECK_COLLECTIVES", 0) != 0;
  settings.shared_memory = settings.shared_memory && env_int("ACCEL_SHARED_MEMORY", 1) != 0;
  if (settings.timeout.count() <= 0)
    detail::fail("Options::timeout is {} ms; it must be positive (the default is 30 minutes; "
                 "ACCEL_TIMEOUT=<seconds> sets it from the environment)",
                 settings.timeout.count());
  if (settings.rendezvous_timeout.count() <= 0)
    detail::fail("Options::rendezvous_timeout is {} ms; it must be positive (the default is 5 "
                 "minutes; ACCEL_RENDEZVOUS_TIMEOUT=<seconds> sets it from the environment)",
                 settings.rendezvous_timeout.count());
  return settings;
}

// The host name MASTER_ADDR must resolve, or the rendezvous would retry until its timeout.
inline void require_resolvable(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (status != 0)
    detail::fail("MASTER_ADDR={} (MASTER_PORT={}) does not resolve: {}; set MASTER_ADDR to rank "
                 "0's host name or IP address",
                 host, port, gai_strerror(status));
  freeaddrinfo(found);
}

}  // namespace accel::runtime
