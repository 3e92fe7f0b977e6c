// The variables a worker gets, and how a process tells that it already is one.
#pragma once

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/random_hex.hpp"
#include "../detail/separate_compilation.hpp"
#include "free_port.hpp"
#include "options.hpp"

extern "C" char** environ;  // NOLINT: POSIX declares it nowhere in a header

namespace accel::launcher {

// Whatever this launcher sets is first removed from the inherited environment, so that a value
// left over from an outer launch (a stale ACCEL_STORE_DIR, say) never reaches a worker.
// ACCEL_RUN_ID is not among them: on several nodes the one the user gives every node's launcher
// passes to the workers (on one node the launcher draws its own, which replaces it).
inline constexpr std::array<std::string_view, 14> launcher_variables = {
    "RANK",       "LOCAL_RANK",  "WORLD_SIZE",  "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "ACCEL_STORE_DIR",
    "ACCEL_ERROR_FILE",     // runtime/failure_record.hpp
    "ACCEL_PROGRESS_FILE",  // runtime/progress_record.hpp
    // restarts.hpp
    "ACCEL_RESTART_COUNT", "ACCEL_MAX_RESTARTS", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS"};

ACCEL_DECL bool is_set(const char* name);

// Started by our launcher or torchrun (RANK, WORLD_SIZE), by srun (SLURM_PROCID) or by mpirun
// (OMPI_COMM_WORLD_RANK). Either of RANK and WORLD_SIZE is enough, as for the runtime: with only
// one of them set, the runtime's error names the missing one, which beats starting workers over it.
inline bool running_as_worker() {
  return is_set("RANK") || is_set("WORLD_SIZE") || is_set("SLURM_PROCID") ||
         is_set("OMPI_COMM_WORLD_RANK");
}

// Where the workers meet: resolved once per launch, the same for every worker of the node.
struct Rendezvous {
  std::string master_addr;
  int master_port = 0;
  std::string store_dir;  // single node only; empty on several nodes
  // The run's identity (runtime/run_identity.hpp): drawn at random on one node; empty on
  // several, where the user's ACCEL_RUN_ID or the scheduler's job id serves.
  std::string run_id;
  // The launcher's private folder, where worker R notes a failure that followed a peer's
  // (failure.R, runtime/failure_record.hpp); empty: none.
  std::string error_dir;
  // The main process's progress record (runtime/progress_record.hpp), one per start of the
  // group; empty: none.
  std::string progress_file;
};

// MASTER_ADDR, MASTER_PORT, the folder for the workers' failure notes (`private_dir`, empty
// for none) and, on one node, the private rendezvous folder (the same) and a random run id.
ACCEL_DECL Rendezvous resolve_rendezvous(const LaunchOptions& options,
                                         const std::string& private_dir);

// Where worker `rank` notes that its failure followed a peer's.
inline std::string error_file(const Rendezvous& rendezvous, int rank) {
  return rendezvous.error_dir + "/failure." + std::to_string(rank);
}

using Variables = std::vector<std::pair<std::string, std::string>>;

ACCEL_DECL Variables worker_variables(const LaunchOptions& options, const Rendezvous& rendezvous,
                                      int local_rank);

ACCEL_DECL bool is_launcher_variable(std::string_view entry);

ACCEL_DECL bool is_set_in(const Variables& variables, std::string_view entry);

// This process's environment, less the launcher's variables and those in `variables`, plus
// `variables`: a worker's envp (with one entry per name: getenv() would read the first).
ACCEL_DECL std::vector<std::string> worker_environment(const Variables& variables);

// Sets a worker's variables in this process (accel::launch() with one process runs the user's
// function in place) and puts the previous environment back when it goes out of scope.
class ScopedWorkerEnvironment {
 public:
  ACCEL_DECL explicit ScopedWorkerEnvironment(const Variables& variables);
  ScopedWorkerEnvironment(const ScopedWorkerEnvironment&) = delete;
  ScopedWorkerEnvironment& operator=(const ScopedWorkerEnvironment&) = delete;
  ACCEL_DECL ~ScopedWorkerEnvironment();

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/environment.ipp"
#endif
