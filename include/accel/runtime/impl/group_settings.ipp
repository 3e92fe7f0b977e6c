// The group settings' environment and checks; group_settings.hpp includes it in header-only mode.
#pragma once

#include "../group_settings.hpp"

namespace accel::runtime {

ACCEL_DECL std::chrono::milliseconds env_seconds(const char* name,
                                                 std::chrono::milliseconds fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(raw, &end);
  if (end == raw || *end != '\0' || !(seconds > 0) || seconds > 1e9)
    accel::detail::fail("{}='{}' is not a positive number of seconds; set it to, for example, 600, "
                        "or unset it",
                        name, raw);
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
}

ACCEL_DECL GroupSettings with_environment(GroupSettings settings) {
  settings.timeout = env_seconds("ACCEL_TIMEOUT", settings.timeout);
  settings.rendezvous_timeout = env_seconds("ACCEL_RENDEZVOUS_TIMEOUT", settings.rendezvous_timeout);
  settings.check_collectives = settings.check_collectives || env_int("ACCEL_CHECK_COLLECTIVES", 0) != 0;
  settings.shared_memory = settings.shared_memory && env_int("ACCEL_SHARED_MEMORY", 1) != 0;
  if (settings.timeout.count() <= 0)
    accel::detail::fail("Options::timeout is {} ms; it must be positive (the default is 30 "
                        "minutes; ACCEL_TIMEOUT=<seconds> sets it from the environment)",
                        settings.timeout.count());
  if (settings.rendezvous_timeout.count() <= 0)
    accel::detail::fail("Options::rendezvous_timeout is {} ms; it must be positive (the default is "
                        "5 minutes; ACCEL_RENDEZVOUS_TIMEOUT=<seconds> sets it from the "
                        "environment)",
                        settings.rendezvous_timeout.count());
  return settings;
}

ACCEL_DECL void require_resolvable(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (status != 0)
    accel::detail::fail("MASTER_ADDR={} (MASTER_PORT={}) does not resolve: {}; set MASTER_ADDR to "
                        "rank 0's host name or IP address",
                        host, port, gai_strerror(status));
  freeaddrinfo(found);
}

}  // namespace accel::runtime
