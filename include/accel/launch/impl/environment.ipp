// The workers' environment; environment.hpp includes it in header-only mode.
#pragma once

#include "../environment.hpp"

namespace accel::launcher {

ACCEL_DECL bool is_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

ACCEL_DECL Variables worker_variables(const LaunchOptions& options, const Rendezvous& rendezvous,
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
  if (!rendezvous.progress_file.empty())
    variables.emplace_back("ACCEL_PROGRESS_FILE", rendezvous.progress_file);
  return variables;
}

ACCEL_DECL Rendezvous resolve_rendezvous(const LaunchOptions& options,
                                         const std::string& private_dir) {
  Rendezvous rendezvous;
  rendezvous.master_addr = options.master_addr.empty() ? loopback_address : options.master_addr;
  const int port = options.master_port.value_or(options.nnodes == 1 ? 0 : default_multi_node_port);
  rendezvous.master_port = port == 0 ? pick_free_port() : port;
  rendezvous.error_dir = private_dir;
  if (!private_dir.empty()) rendezvous.progress_file = private_dir + "/progress";
  if (options.nnodes == 1) {
    rendezvous.store_dir = private_dir;
    // 128 random bits: no other job's ranks carry it (runtime/run_identity.hpp).
    rendezvous.run_id = detail::random_hex(16);
  }
  return rendezvous;
}

ACCEL_DECL bool is_launcher_variable(std::string_view entry) {
  const std::string_view name = entry.substr(0, entry.find('='));
  for (const std::string_view variable : launcher_variables)
    if (name == variable) return true;
  return false;
}

ACCEL_DECL bool is_set_in(const Variables& variables, std::string_view entry) {
  const std::string_view name = entry.substr(0, entry.find('='));
  for (const auto& variable : variables)
    if (name == variable.first) return true;
  return false;
}

ACCEL_DECL std::vector<std::string> worker_environment(const Variables& variables) {
  std::vector<std::string> entries;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry)
    if (!is_launcher_variable(*entry) && !is_set_in(variables, *entry))
      entries.emplace_back(*entry);
  for (const auto& [name, value] : variables) entries.push_back(name + "=" + value);
  return entries;
}

ACCEL_DECL ScopedWorkerEnvironment::ScopedWorkerEnvironment(const Variables& variables) {
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

ACCEL_DECL ScopedWorkerEnvironment::~ScopedWorkerEnvironment() {
  for (const auto& [name, value] : saved_) {
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
}

}  // namespace accel::launcher
