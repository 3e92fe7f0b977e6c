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
inline constexpr std::array<std::string_view, 12> launcher_variables = {
    "RANK",       "LOCAL_RANK",  "WORLD_SIZE",  "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "ACCEL_STORE_DIR",
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
};

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
  return variables;
}

inline bool is_launcher_variable(std::string_view entry) {
  const std::string_view name = entry.substr(0, entry.find('='));
  for (const std::string_view variable : launcher_variables)
    if (name == variable) return true;
  return false;
}

// This process's environment, less the launcher's variables, plus `variables`: a worker's envp.
inline std::vector<std::string> worker_environment(const Variables& variables) {
  std::vector<std::string> entries;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry)
    if (!is_launcher_variable(*entry)) entries.emplace_back(*entry);
  for (const auto& [name, value] : variables) entries.push_back(name + "=" + value);
  return entries;
}

// Sets a worker's variables in this process (accel::launch() with one process runs the user's
// function in place) and puts the previous environment back when it goes out of scope.
class ScopedWorkerEnvironment {
 public:
  explicit ScopedWorkerEnvironment(const Variables& variables) {
    for (const std::string_view variable : launcher_variables) {
      const std::string name(variable);
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(name.c_str());
    }
    for (const auto& [name, value] : variables) ::setenv(name.c_str(), value.c_str(), 1);
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
