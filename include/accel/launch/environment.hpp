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

#include "options.hpp"

extern "C" char** environ;  // NOLINT: POSIX declares it nowhere in a header

namespace accel::launcher {

// Whatever this launcher sets is first removed from the inherited environment, so that a value
// left over from an outer launch (a stale ACCEL_STORE_DIR, say) never reaches a worker.
// ACCEL_RUN_ID is not among them: on several nodes the one the user gives every node's launcher
// passes to the workers (on one node the launcher draws its own, which replaces it).
inline constexpr std::array<std::string_view, 13> launcher_variables = {
    "RANK",       "LOCAL_RANK",  "WORLD_SIZE",  "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "ACCEL_STORE_DIR",
    "ACCEL_ERROR_FILE",  // runtime/failure_record.hpp
    // restarts.hpp
    "ACCEL_RESTART_COUNT", "ACCEL_MAX_RESTARTS", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS"};

inline bool is_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

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
};

// Where worker `rank` notes that its failure followed a peer's.
inline std::string error_file(const Rendezvous& rendezvous, int rank) {
  return rendezvous.error_dir + "/failure." + std::to_string(rank);
}

using Variables = std::vector<std::pair<std::string, std::string>>;

inline Variables worker_variables(const LaunchOptions& options, const Rendezvous& rendezvous,
                                  int local_rank) {
  Variables variables = {
      {"RANK", std::to_string(options.node_rank * options.nproc + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world_size(options))},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc)},
      {"GROUP_RANK", std::to_string(options.node_rank)},
      {"MASTER_ADDR", rendezvous.master_addr},
      {"MASTER_PORT", std::to_string(rendezvous.master_port)},
  };
  if (!rendezvous.store_dir.empty())
    variables.emplace_back("ACCEL_STORE_DIR", rendezvous.store_dir);
  if (!rendezvous.run_id.empty()) variables.emplace_back("ACCEL_RUN_ID", rendezvous.run_id);
  if (!rendezvous.error_dir.empty())
    variables.emplace_back("ACCEL_ERROR_FILE",
                           error_file(rendezvous, options.node_rank * options.nproc + local_rank));
  return variables;
}

inline bool is_launcher_variable(std::string_view entry) {
  const std::string_view name = entry.substr(0, entry.find('='));
  for (const std::string_view variable : launcher_variables)
    if (name == variable) return true;
  return false;
}

inline bool is_set_in(const Variables& variables, std::string_view entry) {
  const std::string_view name = entry.substr(0, entry.find('='));
  for (const auto& variable : variables)
    if (name == variable.first) return true;
  return false;
}

// This process's environment, less the launcher's variables and those in `variables`, plus
// `variables`: a worker's envp (with one entry per name: getenv() would read the first).
inline std::vector<std::string> worker_environment(const Variables& variables) {
  std::vector<std::string> entries;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry)
    if (!is_launcher_variable(*entry) && !is_set_in(variables, *entry))
      entries.emplace_back(*entry);
  for (const auto& [name, value] : variables) entries.push_back(name + "=" + value);
  return entries;
}

// Sets a worker's variables in this process (accel::launch() with one process runs the user's
// function in place) and puts the previous environment back when it goes out of scope.
class ScopedWorkerEnvironment {
 public:
  explicit ScopedWorkerEnvironment(const Variables& variables) {
    const auto save = [&](const std::string& name) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    };
    for (const std::string_view variable : launcher_variables) {
      const std::string name(variable);
      save(name);
      ::unsetenv(name.c_str());
    }
    for (const auto& [name, value] : variables) {
      if (!is_launcher_variable(name)) save(name);  // ACCEL_RUN_ID
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ScopedWorkerEnvironment(const ScopedWorkerEnvironment&) = delete;
  ScopedWorkerEnvironment& operator=(const ScopedWorkerEnvironment&) = delete;
  ~ScopedWorkerEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace accel::launcher
