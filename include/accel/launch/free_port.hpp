// MASTER_PORT 0 on one node: a port the kernel says is free on 127.0.0.1 right now. Another
// process may take it before rank 0 binds it, as with torchrun; single-node runs rendezvous
// through ACCEL_STORE_DIR anyway and do not listen on it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "../detail/separate_compilation.hpp"
#include "error.hpp"
#include "file_descriptor.hpp"

namespace accel::launcher {

ACCEL_DECL int pick_free_port();

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/free_port.ipp"
#endif
