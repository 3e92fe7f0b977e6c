// Reading the launcher's settings from a command line and from ACCEL_NPROC: accel-launch's full
// syntax, and the single `--nproc N` that accel::launch() takes out of a program's arguments.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "error.hpp"
#include "options.hpp"

namespace accel {

inline constexpr std::string_view launch_usage =
    "usage: accel-launch [options] [--] COMMAND [ARGS...]\n"
    "\n"
    "Starts COMMAND as --nproc worker processes with torchrun's variables (RANK, LOCAL_RANK,\n"
    "WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) and supervises them:\n"
    "when one fails, the others get SIGTERM, then SIGKILL after the grace period.\n"
    "\n"
    "  --nproc N          worker processes on this node (default: ACCEL_NPROC, else 1)\n"
    "  --nnodes M         nodes in the job, each running accel-launch (default 1)\n"
    "  --nnodes MIN:MAX   elastic: a restart goes on with the nodes that come back, if >= MIN\n"
    "  --min-nodes MIN    the same as --nnodes MIN:M\n"
    "  --node-rank K      this node's index, 0 .. M-1 (default 0)\n"
    "  --master-addr H    address of node 0 (default 127.0.0.1; required with --nnodes > 1)\n"
    "  --master-port P    port on node 0 (default: a free port on one node, 29500 on several)\n"
    "  --grace S          seconds between SIGTERM and SIGKILL (default 5)\n"
    "  --max-restarts K   when a worker fails, start the whole group again, up to K times\n"
    "  --rendezvous-deadline S  seconds node 0 waits for the other nodes at a start (default 30)\n"
    "  --rank-prefix      prefix every output line of a worker with \"[rank R] \"\n"
    "  --config FILE      settings from a YAML file (accel-launch config writes one); flags win\n"
    "  --threads-per-process T  OMP_NUM_THREADS in every worker (default: cores / nproc)\n"
    "  -h, --help         print this help\n"
    "\n"
    "  accel-launch env               print what a bug report needs (versions, devices, BLAS)\n"
    "  accel-launch test [--nproc N]  self-check on N local processes (default 2)\n"
    "  accel-launch config [-o FILE] [flags]  write a --config file from flags\n"
    "  accel-launch estimate-memory --params N ...  bytes per rank by the ZeRO formulas\n"
    "  accel-launch checkpoint inspect|verify|merge|diff ...  a checkpoint, without its program\n";

struct LaunchCommandLine {
  LaunchOptions options;
  std::vector<std::string> command;  // COMMAND ARGS...
  bool help = false;                 // --help: print launch_usage and start nothing
};

namespace launcher {

// `shown` is how the value appears to the user ("--nproc 'x'" or "ACCEL_NPROC='x'"), `fix` what
// to write instead.
ACCEL_DECL int parse_whole_number(std::string_view text, const std::string& shown,
                                  const std::string& fix);

// `flag` names the option in the messages.
ACCEL_DECL std::chrono::milliseconds parse_seconds(std::string_view text,
                                                   std::string_view flag = "--grace");

// `--nnodes M` or `--nnodes MIN:MAX` into options.nnodes and options.min_nodes.
ACCEL_DECL void parse_nnodes(std::string_view text, LaunchOptions& options);

inline int parse_nproc_flag(std::string_view text) {
  return parse_whole_number(text, "--nproc '" + std::string(text) + "'",
                            "give the number of worker processes per node, e.g. --nproc 2");
}

// ACCEL_NPROC when it is set, else `fallback`.
ACCEL_DECL int nproc_from_environment(int fallback);

// A program's arguments without `--nproc N` / `--nproc=N` (before a `--`, which stays), and the
// last N given.
struct ProgramArguments {
  std::optional<int> nproc;
  std::vector<std::string> arguments;  // argv[0] included
};

ACCEL_DECL ProgramArguments take_nproc_argument(int argc, const char* const* argv);

}  // namespace launcher

// accel-launch's command line. Options come first; the command starts after `--` or at the first
// argument that is not an option. Throws LaunchError for anything it cannot use.
ACCEL_DECL LaunchCommandLine parse_launch_command_line(int argc, const char* const* argv);

}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/command_line.ipp"
#endif
