// What the launcher starts and how it stops it: the settings shared by accel::launch() and the
// accel-launch executable, and the checks that turn a bad value into an `accel:` message before
// any process starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "../detail/separate_compilation.hpp"
#include "error.hpp"

namespace accel {

/// What the launcher starts and how it stops it: accel::launch()'s defaults, accel-launch's flags.
struct LaunchOptions {
  int nproc = 1;      ///< worker processes on this node
  int nnodes = 1;     ///< nodes in the job, each running one launcher (the most, when elastic)
  /// The fewest nodes a restart may go on with (`--nnodes MIN:MAX`, `--min-nodes`); 0: nnodes.
  /// Below nnodes the job is elastic: a restart goes on without a node that does not come back
  /// (node_rendezvous.hpp).
  int min_nodes = 0;
  int node_rank = 0;  ///< this node's index, 0 .. nnodes-1
  /// Where rank 0's node listens. Empty: 127.0.0.1 on one node; required on several.
  std::string master_addr{};
  /// Unset: 0 on one node (pick a free port), 29500 on several (torchrun's default). 0 is only
  /// valid on one node: every node must agree on the port.
  std::optional<int> master_port{};
  /// Between SIGTERM and SIGKILL when the workers are stopped.
  std::chrono::milliseconds grace{5000};
  /// Prefix every line the workers print with "[rank R] ".
  bool rank_prefix = false;
  /// When a worker fails, stop the group and start every worker again, up to this many times
  /// (restarts.hpp). On several nodes the launchers meet before each start (node_rendezvous.hpp).
  int max_restarts = 0;
  /// How long node 0's launcher waits at a start for the nodes of the start before (all of them
  /// at first); the others wait for node 0 twice as long, plus the grace period.
  std::chrono::milliseconds rendezvous_deadline{30000};
};

namespace launcher {

inline constexpr int default_multi_node_port = 29500;
inline constexpr const char* loopback_address = "127.0.0.1";

inline int world_size(const LaunchOptions& options) { return options.nproc * options.nnodes; }

inline int fewest_nodes(const LaunchOptions& options) {
  return options.min_nodes == 0 ? options.nnodes : options.min_nodes;
}

// Whether the launchers of several nodes meet before each start: elastic, or restarting.
inline bool nodes_meet(const LaunchOptions& options) {
  return options.nnodes > 1 && (fewest_nodes(options) < options.nnodes || options.max_restarts > 0);
}

// 5000 ms -> "5", 1500 ms -> "1.5": how a grace period is written on the command line.
ACCEL_DECL std::string format_seconds(std::chrono::milliseconds duration);

ACCEL_DECL void validate(const LaunchOptions& options);

}  // namespace launcher
}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/options.ipp"
#endif
