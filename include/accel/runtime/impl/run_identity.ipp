// The run identity; run_identity.hpp includes it in header-only mode.
#pragma once

#include "../run_identity.hpp"

namespace accel::runtime {

ACCEL_DECL RunId read_run_id() {
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

ACCEL_DECL std::string RunIdentity::describe() const {
  const std::string ranks = " of " + std::to_string(world_size) + " rank" +
                            (world_size == 1 ? "" : "s");
  if (run.value.empty()) return "an unnamed run" + ranks;
  return "run '" + run.value + "' (" + run.source + ")" + ranks;
}

ACCEL_DECL RunIdentity RunIdentity::decode(std::string_view text) {
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

}  // namespace accel::runtime
