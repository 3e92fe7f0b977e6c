// LaunchOptions' checks; options.hpp includes it in header-only mode.
#pragma once

#include "../options.hpp"

namespace accel::launcher {

ACCEL_DECL std::string format_seconds(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  std::string text = std::to_string(ms / 1000);
  if (const auto fraction = (ms < 0 ? -ms : ms) % 1000; fraction != 0) {
    if (ms < 0 && ms > -1000) text = "-0";
    std::string digits = std::to_string(1000 + fraction).substr(1);  // "050" for 50 ms
    while (digits.back() == '0') digits.pop_back();
    text += "." + digits;
  }
  return text;
}

ACCEL_DECL void validate(const LaunchOptions& options) {
  if (options.nproc < 1)
    fail("--nproc " + std::to_string(options.nproc) +
         " is out of range; give at least 1 worker process per node, e.g. --nproc 2");
  if (options.nnodes < 1)
    fail("--nnodes " + std::to_string(options.nnodes) +
         " is out of range; give at least 1 node (1 for a single machine)");
  if (std::int64_t{options.nproc} * options.nnodes > 1'000'000)
    fail("--nproc " + std::to_string(options.nproc) + " with --nnodes " +
         std::to_string(options.nnodes) + " makes more than a million ranks; check both values");
  if (options.node_rank < 0 || options.node_rank >= options.nnodes)
    fail("--node-rank " + std::to_string(options.node_rank) + " is out of range for --nnodes " +
         std::to_string(options.nnodes) + "; node ranks go from 0 to " +
         std::to_string(options.nnodes - 1) + ", one per node");
  if (options.nnodes > 1 && options.master_addr.empty())
    fail("--nnodes " + std::to_string(options.nnodes) +
         " needs --master-addr: the address of the node with --node-rank 0, reachable from "
         "every node");
  if (options.master_port) {
    const int port = *options.master_port;
    if (port < 0 || port > 65535)
      fail("--master-port " + std::to_string(port) +
           " is out of range; give a port from 1 to 65535 (or 0 on one node for a free one)");
    if (port == 0 && options.nnodes > 1)
      fail("--master-port 0 picks a free port on one node only; with --nnodes " +
           std::to_string(options.nnodes) + " give every node the same port, e.g. --master-port " +
           std::to_string(default_multi_node_port));
  }
  if (options.max_restarts < 0)
    fail("--max-restarts " + std::to_string(options.max_restarts) +
         " is out of range; give how many times a failed group may be started again, e.g. "
         "--max-restarts 3 (0: never)");
  if (options.min_nodes < 0 || options.min_nodes > options.nnodes)
    fail("--nnodes " + std::to_string(options.min_nodes) + ":" + std::to_string(options.nnodes) +
         " (or --min-nodes " + std::to_string(options.min_nodes) + " with --nnodes " +
         std::to_string(options.nnodes) +
         ") is out of range; give MIN:MAX with 1 <= MIN <= MAX, e.g. --nnodes 1:2 (a restart "
         "may go on with 1 node of 2)");
  if (nodes_meet(options) && options.master_port && *options.master_port == 65535)
    fail("--master-port 65535 leaves no port for the launchers' rendezvous, which listens on "
         "--master-port + 1 on node 0; give a lower port, e.g. --master-port 29500");
  if (options.rendezvous_deadline.count() <= 0)
    fail("--rendezvous-deadline " + format_seconds(options.rendezvous_deadline) +
         " is out of range; give the seconds node 0 waits for the other nodes at a start, e.g. "
         "--rendezvous-deadline 30");
  if (options.grace.count() < 0)
    fail("--grace " + format_seconds(options.grace) +
         " is negative; give the seconds between SIGTERM and SIGKILL, e.g. --grace 5");
}

}  // namespace accel::launcher
