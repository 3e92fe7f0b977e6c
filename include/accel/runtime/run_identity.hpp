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

#include "../detail/separate_compilation.hpp"

namespace accel::runtime {

struct RunId {
  std::string value;   // empty: no identity known
  std::string source;  // the variable(s) it came from, for the messages
};

// The first identity the environment gives, in the order above.
ACCEL_DECL RunId read_run_id();

// What the ranks of one job agree on; what they compare when they meet.
struct RunIdentity {
  RunId run;
  int world_size = 1;

  [[nodiscard]] bool same_job(const RunIdentity& other) const {
    return run.value == other.run.value && world_size == other.world_size;
  }

  // "run 'abc' (ACCEL_RUN_ID) of 4 ranks", "an unnamed run of 4 ranks".
  [[nodiscard]] ACCEL_DECL std::string describe() const;

  // Through the store: "<world size>\n<source>\n<value>".
  [[nodiscard]] std::string encode() const {
    return std::to_string(world_size) + "\n" + run.source + "\n" + run.value;
  }
  // An identity written by encode(); anything else (a store of another program) reads as an
  // identity with world size 0, which matches no job.
  ACCEL_DECL static RunIdentity decode(std::string_view text);
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/run_identity.ipp"
#endif
