// MASTER_PORT 0 on one node: a port the kernel says is free on 127.0.0.1 right now. Another
// process may take it before rank 0 binds it, as with torchrun; single-node runs rendezvous
// through ACCEL_STORE_DIR anyway and do not listen on it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "error.hpp"
#include "file_descriptor.hpp"

namespace accel::launcher {

inline int pick_free_port() {
  const FileDescriptor socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!socket) fail_with_errno("cannot open a socket to pick a free port (give --master-port)");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (::bind(socket.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      ::getsockname(socket.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0)
    fail_with_errno("cannot pick a free port on 127.0.0.1 (give --master-port)");
  return ntohs(address.sin_port);
}

}  // namespace accel::launcher
