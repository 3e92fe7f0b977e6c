// Which job a rank belongs to: the run's identity, checked when the ranks meet (admission.hpp),
// so that a process of another job that reaches the same MASTER_ADDR:MASTER_PORT is refused
// instead of taking a rank's place.
//
// The identity is one that every rank of a job shares and the ranks of another job do not:
// ACCEL_RUN_ID (accel-launch draws a random one for each start of a node's group; set it
// yourself to the same value on every node of a job), torchrun's TORCHELASTIC_RUN_ID (its
// --rdzv-id; "none", torchrun's default, names nothing), Slurm's job and step (one srun), or
// the job of mpirun (PMIx's namespace, OpenMPI's job id). Without any of them the world size is
// still compared, and two processes claiming one rank are still told apart.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

namespace accel::runtime {

struct RunId {
  std::string value;   // empty: no identity known
  std::string source;  // the variable(s) it came from, for the messages
};

// The first identity the environment gives, in the order above.
inline RunId read_run_id() {
  const auto get = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  if (std::string id = get("ACCEL_RUN_ID"); !id.empty()) return {id, "ACCEL_RUN_ID"};
  if (std::string id = get("TORCHELASTIC_RUN_ID"); !id.empty() && id != "none")
    return {id, "TORCHELASTIC_RUN_ID"};
  if (std::string job = get("SLURM_JOB_ID"); !job.empty()) {
    const std::string step = get("SLURM_STEP_ID");
    if (step.empty()) return {job, "SLURM_JOB_ID"};
    return {job + "." + step, "SLURM_JOB_ID.SLURM_STEP_ID"};
  }
  if (std::string id = get("PMIX_NAMESPACE"); !id.empty()) return {id, "PMIX_NAMESPACE"};
  if (std::string id = get("OMPI_MCA_ess_base_jobid"); !id.empty())
    return {id, "OMPI_MCA_ess_base_jobid"};
  return {};
}

// What the ranks of one job agree on; what they compare when they meet.
struct RunIdentity {
  RunId run;
  int world_size = 1;

  [[nodiscard]] bool same_job(const RunIdentity& other) const {
    return run.value == other.run.value && world_size == other.world_size;
  }

  // "run 'abc' (ACCEL_RUN_ID) of 4 ranks", "an unnamed run of 4 ranks".
  [[nodiscard]] std::string describe() const {
    const std::string ranks = " of " + std::to_string(world_size) + " rank" +
                              (world_size == 1 ? "" : "s");
    if (run.value.empty()) return "an unnamed run" + ranks;
    return "run '" + run.value + "' (" + run.source + ")" + ranks;
  }

  // Through the store: "<world size>\n<source>\n<value>".
  [[nodiscard]] std::string encode() const {
    return std::to_string(world_size) + "\n" + run.source + "\n" + run.value;
  }
  // An identity written by encode(); anything else (a store of another program) reads as an
  // identity with world size 0, which matches no job.
  static RunIdentity decode(std::string_view text) {
    RunIdentity identity;
    identity.world_size = 0;
    const auto first = text.find('\n');
    const auto second = first == std::string_view::npos ? first : text.find('\n', first + 1);
    if (second == std::string_view::npos) {
      identity.run = {std::string(text), "unknown"};
      return identity;
    }
    identity.world_size = std::atoi(std::string(text.substr(0, first)).c_str());
    identity.run.source = std::string(text.substr(first + 1, second - first - 1));
    identity.run.value = std::string(text.substr(second + 1));
    return identity;
  }
};

}  // namespace accel::runtime
