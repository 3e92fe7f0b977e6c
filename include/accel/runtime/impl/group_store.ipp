// The group's store; group_store.hpp includes it in header-only mode.
#pragma once

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "../group_store.hpp"

namespace accel::runtime {

ACCEL_DECL c10::intrusive_ptr<c10d::Store> job_tcp_store(const Environment& env,
                                                         RendezvousClock::time_point deadline,
                                                         std::chrono::milliseconds rendezvous) {
  static std::mutex mutex;
  static std::map<std::string, c10::intrusive_ptr<c10d::Store>> stores;
  const int rank = env.process.rank, size = env.process.world_size;
  const std::scoped_lock lock(mutex);
  auto& store = stores[fmt::format("{}:{}", env.master_addr, env.master_port)];
  if (store) return store;
  require_resolvable(env.master_addr, env.master_port);
  auto made = make_tcp_store(env, rank, size, deadline, rendezvous);  // tcp_store.hpp
  Admission(*made, {env.run_id, size}, rank,
            {fmt::format("the rendezvous at MASTER_ADDR={} MASTER_PORT={}", env.master_addr,
                         env.master_port),
             "give each job its own MASTER_PORT"},
            deadline, rendezvous)
      .run();
  store = std::move(made);
  return store;
}

ACCEL_DECL c10::intrusive_ptr<c10d::Store> group_store(const Environment& env, int group_number,
                                                       RendezvousClock::time_point deadline,
                                                       std::chrono::milliseconds rendezvous) {
  if (env.store_dir.empty()) return job_tcp_store(env, deadline, rendezvous);
  const int rank = env.process.rank, size = env.process.world_size;
  // A folder only this user can read (accel-launch makes it 0700): no socket is opened.
  // One file per group: a FileStore deletes its file when the last of its users closes it,
  // which could otherwise remove the next group's keys while a slower rank leaves this one.
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::FileStore>(
      fmt::format("{}/store.{}", env.store_dir, group_number), size);
  // Nobody else can reach the folder; the admission still bounds the wait by the timeout.
  Admission(*store, {env.run_id, size}, rank,
            {fmt::format("the store folder {}", env.store_dir),
             "start every rank of a job with the same ACCEL_STORE_DIR"},
            deadline, rendezvous)
      .run();
  return store;
}

}  // namespace accel::runtime
