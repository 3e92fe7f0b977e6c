// The ranks of one run meeting in their store, before Gloo: rank 0 admits the ranks of its own
// run and nobody else, and everyone knows, within the rendezvous deadline, that every rank is
// there. Without it, a process of another job on the same MASTER_PORT took a rank's place (the
// job's own rank then failed while the job reported success), a stray rank sat in Gloo's
// rendezvous for the collectives' timeout (102 s with a rendezvous timeout of 20 s), and a rank
// alone waited far past the rendezvous timeout, since Gloo waits for its peers' addresses for as
// long as a collective may take.
//
// In the store, under accel/rendezvous/:
//   identity    rank 0's run identity (run_identity.hpp)
//   claim/R     how many processes of rank 0's run came as rank R: the first is admitted
//   joined      how many ranks were admitted
//   refused, refused/N   how many processes were turned away, and who each one was
//   complete    set by rank 0 once every rank has joined
// Everyone polls: the store has no "wait for any of these" (rank 0 names the processes it turned
// away while it waits), and a wait() that times out leaves a TCPStore client out of step.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "error_line.hpp"
#include "run_identity.hpp"
#include "store_text.hpp"
#include "tcp_store.hpp"

namespace accel::runtime {

// Where the ranks meet, as the messages say it, and the fix for a process of another job there.
struct MeetingPoint {
  std::string where;  // "the rendezvous at MASTER_ADDR=... MASTER_PORT=..."
  std::string fix;    // "give each job its own MASTER_PORT"
};

class Admission {
 public:
  ACCEL_DECL Admission(c10d::Store& store, RunIdentity identity, int rank, MeetingPoint meeting,
                       RendezvousClock::time_point deadline, std::chrono::milliseconds rendezvous);

  // Collective over the run's ranks; throws accel::Error when this rank may not go on.
  ACCEL_DECL void run();

 private:
  static std::string key(const std::string& name) { return "accel/rendezvous/" + name; }
  std::string get_text(const std::string& name) {
    return store_text(store_.get(key(name)));
  }
  [[nodiscard]] double seconds() const {
    return std::chrono::duration<double>(rendezvous_).count();
  }
  // "rank 1 of run 'x' (ACCEL_RUN_ID) of 2 ranks (pid 123 on node7)": who was turned away.
  ACCEL_DECL std::string who() const;
  // Waits for a key until the deadline; false when it did not come. By polling: a TCPStore
  // client whose wait() timed out may read the late answer to it as the answer to its next
  // request.
  ACCEL_DECL bool wait_for(const std::string& name);
  // The ranks, other than 0, that have not claimed their place: "rank 2", "ranks 1, 3"; empty
  // when all have (one that died between its claim and joining, or rank 0 gone quiet).
  ACCEL_DECL std::string missing();
  static std::string or_else(std::string text, const char* fallback) {
    return text.empty() ? std::string(fallback) : text;
  }
  // Turned away as `kind` ("a rank of another job"): says so in the store, for rank 0's report.
  ACCEL_DECL void refuse(const std::string& kind);

  ACCEL_DECL void join();

  ACCEL_DECL void admit_the_others();

  // One line on stderr per process turned away; this run goes on.
  ACCEL_DECL void report(const std::string& record) const;

  c10d::Store& store_;
  RunIdentity mine_;
  int rank_;
  MeetingPoint meeting_;
  RendezvousClock::time_point deadline_;
  std::chrono::milliseconds rendezvous_;
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/admission.ipp"
#endif
