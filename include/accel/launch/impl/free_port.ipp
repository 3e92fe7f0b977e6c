// pick_free_port(); free_port.hpp includes it in header-only mode.
#pragma once

#include "../free_port.hpp"

namespace accel::launcher {

ACCEL_DECL int pick_free_port() {
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
