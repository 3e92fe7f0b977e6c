// The job's c10d TCPStore at MASTER_ADDR:MASTER_PORT, reached within the rendezvous deadline:
// rank 0 serves it, the other ranks connect to it.
//
// c10d's own waiting is left out. Its server waits for every client (waitWorkers), counts a
// stranger's connection as one of them, and when they do not come goes on without a word
// (libtorch 1.13: 4 s for a 3 s timeout, then no error), after which a lone rank 0 sat in Gloo's
// rendezvous for the collectives' timeout (43 s for a rendezvous timeout of 20 s); rank 0 waits
// for the ranks of its own run itself (admission.hpp). c10d's client gives up as much as a second
// before its timeout and logs an error line per attempt: the other ranks first wait, quietly and
// until the deadline, for something to accept connections at the address.
#pragma once

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "environment.hpp"
#include "error_line.hpp"

namespace accel::runtime {

using RendezvousClock = std::chrono::steady_clock;

ACCEL_DECL std::chrono::milliseconds time_left(RendezvousClock::time_point deadline);

// Whether one connection to `address` succeeds within `limit` (a non-blocking connect: a host
// that drops packets would otherwise hold connect() for minutes).
ACCEL_DECL bool accepts_connection(const addrinfo& address, std::chrono::milliseconds limit);

// Waits until something accepts TCP connections at host:port, at most until `deadline`.
ACCEL_DECL bool wait_for_listener(const std::string& host, int port,
                                  RendezvousClock::time_point deadline);

// The store, within `deadline` (`rendezvous` is the whole timeout, for the messages).
ACCEL_DECL c10::intrusive_ptr<c10d::Store> make_tcp_store(const Environment& env, int rank,
                                                          int size,
                                                          RendezvousClock::time_point deadline,
                                                          std::chrono::milliseconds rendezvous);

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/tcp_store.ipp"
#endif
