// The environment's readers; environment.hpp includes it in header-only mode.
#pragma once

#include "../environment.hpp"

namespace accel::runtime {

ACCEL_DECL std::string_view to_string(Launcher launcher) {
  switch (launcher) {
    case Launcher::torchrun: return "torchrun-style variables (accel-launch, torchrun)";
    case Launcher::slurm: return "Slurm";
    case Launcher::openmpi: return "OpenMPI";
    default: return "a single process";
  }
}

ACCEL_DECL std::optional<std::string> env_string(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  return std::string(raw);
}

ACCEL_DECL int required_env_int(const char* name, Launcher launcher) {
  if (!env_string(name))
    accel::detail::fail("{} is not set, but the job looks launched by {}; set {} or unset the "
                        "other launcher variables",
                        name, to_string(launcher), name);
  return env_int(name, 0);
}

ACCEL_DECL std::string first_slurm_host(std::string_view list) {
  const auto end = list.find_first_of(",[");
  std::string host(list.substr(0, end));
  if (end != std::string_view::npos && list[end] == '[') {
    const auto range = list.substr(end + 1);
    host += std::string(range.substr(0, range.find_first_of("-,]")));
  }
  return host;
}

ACCEL_DECL Environment read_environment() {
  Environment env;
  ProcessInfo& p = env.process;
  if (env_string("RANK") || env_string("WORLD_SIZE")) {
    env.launcher = Launcher::torchrun;
    p.rank = required_env_int("RANK", env.launcher);
    p.world_size = required_env_int("WORLD_SIZE", env.launcher);
    p.local_rank = env_int("LOCAL_RANK", p.rank);
    p.local_world_size = env_int("LOCAL_WORLD_SIZE", p.world_size);
    env.node_rank = env_int("GROUP_RANK", 0);
  } else if (env_string("SLURM_PROCID")) {
    env.launcher = Launcher::slurm;
    p.rank = required_env_int("SLURM_PROCID", env.launcher);
    p.world_size = required_env_int("SLURM_NTASKS", env.launcher);
    p.local_rank = required_env_int("SLURM_LOCALID", env.launcher);
    env.node_rank = env_int("SLURM_NODEID", 0);
    auto per_node = env_string("SLURM_NTASKS_PER_NODE");
    if (!per_node) per_node = env_string("SLURM_TASKS_PER_NODE");
    p.local_world_size = per_node ? first_slurm_count(*per_node) : p.world_size;
    if (!env_string("MASTER_ADDR"))
      if (const auto nodes = env_string("SLURM_JOB_NODELIST"))
        env.master_addr = first_slurm_host(*nodes);
  } else if (env_string("OMPI_COMM_WORLD_RANK")) {
    env.launcher = Launcher::openmpi;
    p.rank = required_env_int("OMPI_COMM_WORLD_RANK", env.launcher);
    p.world_size = required_env_int("OMPI_COMM_WORLD_SIZE", env.launcher);
    p.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    p.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", p.world_size);
    env.node_rank = p.local_world_size > 0 ? p.rank / p.local_world_size : 0;
    // All ranks on this node: the job is single-node and can stay on loopback.
    if (p.local_world_size == p.world_size) env.master_addr = "127.0.0.1";
  }
  if (const auto addr = env_string("MASTER_ADDR")) env.master_addr = *addr;
  env.master_port = env_int("MASTER_PORT", env.master_port);
  env.store_dir = env_string("ACCEL_STORE_DIR").value_or("");
  env.run_id = read_run_id();

  if (p.world_size < 1)
    accel::detail::fail("WORLD_SIZE={} (from {}); a job has at least one process", p.world_size,
                        to_string(env.launcher));
  if (p.rank < 0 || p.rank >= p.world_size)
    accel::detail::fail("RANK={} is outside 0..WORLD_SIZE-1 with WORLD_SIZE={} (from {}); every "
                        "rank must be below the world size",
                        p.rank, p.world_size, to_string(env.launcher));
  if (p.local_world_size < 1 || p.local_world_size > p.world_size)
    accel::detail::fail("LOCAL_WORLD_SIZE={} with WORLD_SIZE={}; it must be between 1 and the "
                        "world size",
                        p.local_world_size, p.world_size);
  if (p.local_rank < 0 || p.local_rank >= p.local_world_size)
    accel::detail::fail("LOCAL_RANK={} is outside 0..LOCAL_WORLD_SIZE-1 with LOCAL_WORLD_SIZE={}",
                        p.local_rank, p.local_world_size);
  if (env.master_port < 0 || env.master_port > 65535)
    accel::detail::fail("MASTER_PORT={} is not a TCP port; use 1..65535 (0 only with accel-launch, "
                        "which picks a free one)",
                        env.master_port);
  if (p.world_size > 1 && env.store_dir.empty() && env.master_addr.empty())
    accel::detail::fail("WORLD_SIZE={} but no MASTER_ADDR: the ranks cannot find each other; set "
                        "MASTER_ADDR (and MASTER_PORT) to rank 0's host",
                        p.world_size);
  return env;
}

}  // namespace accel::runtime
