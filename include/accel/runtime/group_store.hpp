// The c10d store a process group's ranks meet through, reached and its ranks admitted
// (admission.hpp) within the rendezvous deadline: a FileStore in the launch's private folder
// under accel-launch (ACCEL_STORE_DIR: no socket anywhere), else the job's TCPStore at
// MASTER_ADDR:MASTER_PORT (tcp_store.hpp). The group keeps its keys under a prefix of its own.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "admission.hpp"
#include "environment.hpp"
#include "group_settings.hpp"
#include "tcp_store.hpp"

namespace accel::runtime {

// The job's TCPStore at MASTER_ADDR:MASTER_PORT, made by the process's first group there (rank
// 0 serves it) and kept for the later ones (a second Accelerator), each under its own prefix:
// were each group to make its own, rank 0 would close the first one's server while the other
// ranks may already be connecting to it for the next. Anyone can reach the port: the ranks
// are admitted by their run's identity when the store is made (admission.hpp).
ACCEL_DECL c10::intrusive_ptr<c10d::Store> job_tcp_store(const Environment& env,
                                                         RendezvousClock::time_point deadline,
                                                         std::chrono::milliseconds rendezvous);

// The store of this process's group number `group_number` (groups are numbered in the order
// the ranks make them, which is the same on every rank).
ACCEL_DECL c10::intrusive_ptr<c10d::Store> group_store(const Environment& env, int group_number,
                                                       RendezvousClock::time_point deadline,
                                                       std::chrono::milliseconds rendezvous);

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/group_store.ipp"
#endif
