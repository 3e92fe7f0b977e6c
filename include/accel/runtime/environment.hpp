// Where this process sits in the job, read from whichever launcher started it: accel's own
// launcher or torchrun (RANK, WORLD_SIZE, ...), Slurm (SLURM_PROCID, ...), OpenMPI
// (OMPI_COMM_WORLD_*), or nothing at all (one process). Missing or inconsistent values stop the
// run at start, naming the variable and its value, instead of surfacing later as a hang.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "process.hpp"
#include "run_identity.hpp"

namespace accel::runtime {

enum class Launcher { none, torchrun, slurm, openmpi };

ACCEL_DECL std::string_view to_string(Launcher launcher);

struct Environment {
  ProcessInfo process;
  int node_rank = 0;
  std::string master_addr;  // empty when the world is one process or a store folder is used
  int master_port = 29500;
  std::string store_dir;    // ACCEL_STORE_DIR: rendezvous through a private folder, no socket
  Launcher launcher = Launcher::none;
  RunId run_id;             // which job this is (run_identity.hpp); empty when nothing says
};

ACCEL_DECL std::optional<std::string> env_string(const char* name);

// An integer variable that must be present once a launcher has been recognised.
ACCEL_DECL int required_env_int(const char* name, Launcher launcher);

// The first host of a Slurm node list: "gpu[003-005,010],cpu01" -> "gpu003".
ACCEL_DECL std::string first_slurm_host(std::string_view list);

// "4(x2),3" -> 4: tasks on the first node, which is this node's count in a uniform job.
inline int first_slurm_count(const std::string& text) {
  return std::atoi(text.c_str());
}

ACCEL_DECL Environment read_environment();

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/environment.ipp"
#endif
