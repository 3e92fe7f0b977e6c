// The TCPStore rendezvous; tcp_store.hpp includes it in header-only mode.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "../tcp_store.hpp"

namespace accel::runtime {

ACCEL_DECL std::chrono::milliseconds time_left(RendezvousClock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::ceil<std::chrono::milliseconds>(deadline - RendezvousClock::now()));
}

ACCEL_DECL bool accepts_connection(const addrinfo& address, std::chrono::milliseconds limit) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          address.ai_protocol);
  if (fd < 0) return false;
  bool connected = ::connect(fd, address.ai_addr, address.ai_addrlen) == 0;
  if (!connected && errno == EINPROGRESS) {
    pollfd writable{fd, POLLOUT, 0};
    if (::poll(&writable, 1, static_cast<int>(limit.count())) == 1) {
      int error = 0;
      socklen_t length = sizeof error;
      connected = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
  }
  ::close(fd);
  return connected;
}

ACCEL_DECL bool wait_for_listener(const std::string& host, int port,
                                  RendezvousClock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      bool reached = false;
      for (const addrinfo* address = found; address != nullptr && !reached;
           address = address->ai_next)
        reached = accepts_connection(
            *address, std::clamp(time_left(deadline), std::chrono::milliseconds(1),
                                 std::chrono::milliseconds(1000)));
      ::freeaddrinfo(found);
      if (reached) return true;
    }
    const auto left = time_left(deadline);
    if (left.count() == 0) return false;
    std::this_thread::sleep_for(std::min(pause, left));
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

ACCEL_DECL c10::intrusive_ptr<c10d::Store> make_tcp_store(const Environment& env, int rank,
                                                          int size,
                                                          RendezvousClock::time_point deadline,
                                                          std::chrono::milliseconds rendezvous) {
  const double seconds = std::chrono::duration<double>(rendezvous).count();
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = rank == 0;
  options.numWorkers = static_cast<std::size_t>(size);
  options.waitWorkers = false;  // admission.hpp waits, for this run's ranks only
  options.timeout = rendezvous;
  accel::detail::use_classic_tcp_store(options);  // torch_compat.hpp: 2.6 without libuv
  if (rank == 0) {
    try {
      return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    } catch (const std::exception& error) {
      accel::detail::fail("rank 0 cannot serve the rendezvous on MASTER_PORT={} ({}); another "
                          "program (another job's rank 0?) may hold the port: give each job its "
                          "own MASTER_PORT",
                          env.master_port, error_line(error));
    }
  }
  if (!wait_for_listener(env.master_addr, env.master_port, deadline))
    accel::detail::fail("rank {} could not reach the rendezvous at MASTER_ADDR={} MASTER_PORT={} "
                        "within the rendezvous timeout of {} s (Options::rendezvous_timeout, "
                        "ACCEL_RENDEZVOUS_TIMEOUT): nothing accepted a connection there; start "
                        "rank 0 with the same MASTER_ADDR and MASTER_PORT, or raise the timeout",
                        rank, env.master_addr, env.master_port, seconds);
  // Something listens: what is left of the time (a second at least) to speak to it.
  options.timeout = std::max(time_left(deadline), std::chrono::milliseconds(1000));
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    store->setTimeout(rendezvous);
    return store;
  } catch (const std::exception& error) {
    accel::detail::fail("rank {} could not reach the rendezvous at MASTER_ADDR={} MASTER_PORT={} "
                        "within the rendezvous timeout of {} s (Options::rendezvous_timeout, "
                        "ACCEL_RENDEZVOUS_TIMEOUT): {}; is rank 0 of this job listening there?",
                        rank, env.master_addr, env.master_port, seconds, error_line(error));
  }
}

}  // namespace accel::runtime
