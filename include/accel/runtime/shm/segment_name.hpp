// The names of a run's shared-memory segments and their removal. No dependency beyond POSIX: the
// launcher removes a crashed run's segments with it.
//
// The runtime names a segment "/accel-shm.<run token>.<nonce>.<group>" (fresh_segment_name):
// the run token, which anyone who lists $TMPDIR can read off the launch's folder, lets the
// launcher find what the run left; the nonce, 64 random bits drawn by the rank that creates the
// segment, is what nobody can guess, so nobody can create the name first and make the launch
// fail. "/accel-shm.<run token>.<group>" (segment_name) is the predictable form, for programs
// that meet without a store (the transport's own tests and benchmark).
#pragma once

#include <dirent.h>
#include <sys/mman.h>

#include <string>
#include <string_view>

#include "../../detail/random_hex.hpp"
#include "../../detail/separate_compilation.hpp"

namespace accel::runtime::shm {

inline constexpr std::string_view segment_prefix = "accel-shm.";

// The token of a run that meets in a private folder ".../accel-XXXXXX" (accel-launch's
// ACCEL_STORE_DIR): the XXXXXX, unique on the host while the run lasts.
ACCEL_DECL std::string run_token_of(std::string_view store_dir);

ACCEL_DECL std::string segment_name(std::string_view run_token, std::string_view group);
inline std::string segment_name(std::string_view run_token, int group) {
  return segment_name(run_token, std::to_string(group));
}

// A name for a new segment of `group`, unguessable; `run_token` may be empty (no launcher to
// clean up after the run: torchrun, Slurm, mpirun).
ACCEL_DECL std::string fresh_segment_name(std::string_view run_token, std::string_view group);

// Whether `name` is one of accel's segment names (what a peer reads from the store).
ACCEL_DECL bool is_segment_name(std::string_view name);

// Removes every segment name of the run: what a rank killed during set-up leaves behind (after
// set-up the names are gone already, transport.hpp).
ACCEL_DECL void remove_segments_of_run(std::string_view run_token);

}  // namespace accel::runtime::shm

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/segment_name.ipp"
#endif
