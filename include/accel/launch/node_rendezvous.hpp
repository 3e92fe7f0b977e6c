// The launchers of several nodes meet before each start of the group, as torchrun's elastic
// agents do, so that a restart can go on without a node that is gone (`--nnodes MIN:MAX`).
//
// Node 0's launcher hosts the meeting on --master-port + 1 (the workers' store, hosted by rank 0
// on node 0, holds --master-port while they run; the next port keeps the meeting where the
// store is). It listens from its first start to its exit, so a node that arrives while node 0's
// workers still run waits in the listen queue instead of being refused. At each start node 0
// waits for every node of the start before (every node, at the first) until
// LaunchOptions::rendezvous_deadline has passed; the nodes that came are numbered again in the
// order of their --node-rank (node 0 stays 0: its rank 0 hosts the store), and the group starts
// with them if they are at least MIN, else every launcher ends with an `accel:` error naming
// the numbers. A node that comes after the meeting closed, or that an earlier start went on
// without, is refused: the group has ranks numbered without it.
//
// Limits: node 0 hosts the meeting, so a job that loses node 0 cannot go on (the others end
// with an error that says so once they have waited for it); a node whose workers neither fail
// nor exit is not noticed by the others, which wait in the meeting until its deadline. Every
// node starts the same --nproc.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "error.hpp"
#include "file_descriptor.hpp"
#include "options.hpp"

namespace accel::launcher {

// One start's place of this node.
struct Membership {
  int node_rank = 0;      // this node's index in this start
  int nnodes = 1;         // the nodes of this start
  std::vector<int> lost;  // the nodes of the start before (their --node-rank) that did not come
};

class NodeRendezvous {
 public:
  // On node 0, opens the meeting's port (a LaunchError when it is taken).
  ACCEL_DECL explicit NodeRendezvous(const LaunchOptions& options);

  // Before start `start` (0 first, as ACCEL_RESTART_COUNT): this node's place in it, or a
  // LaunchError when the group cannot start (below MIN, node 0 gone, this node left out).
  ACCEL_DECL Membership meet(int start);

  // meet(start), then `current` set to this node's place in it (node rank, nodes), and a line
  // on stderr when the start has fewer nodes than the one before.
  ACCEL_DECL void enter_start(int start, LaunchOptions& current);

  [[nodiscard]] int port() const { return port_; }

 private:
  ACCEL_DECL Membership host(int start);
  ACCEL_DECL Membership join(int start);

  const LaunchOptions& options_;
  int port_ = 0;
  FileDescriptor listener_;
  std::vector<int> members_;  // the --node-rank of every node of the last start
};

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/node_rendezvous.ipp"
#endif
