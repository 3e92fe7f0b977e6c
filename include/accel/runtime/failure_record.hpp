// A worker's note to its launcher that its failure is a consequence, not a cause: one of its
// collectives failed because a peer went away (Gloo's "Connection closed by peer", a peer's
// exit seen through shared memory). The launcher names the first failure as the root cause, and
// the exits alone do not tell it which one that was: a rank that throws closes its connections
// while it unwinds, and the peer that fails on the closed connection may well exit first (over
// Gloo it did in 4 runs of 6). With the note, the launcher prefers a failure without one
// (launch/supervisor.hpp).
//
// The launcher gives each worker its own file, ACCEL_ERROR_FILE, in its private folder, as
// torchelastic gives TORCHELASTIC_ERROR_FILE. The first note stays. POSIX only, no torch: the
// launcher reads what the runtime writes.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "../detail/separate_compilation.hpp"

namespace accel::runtime {

inline constexpr const char* error_file_variable = "ACCEL_ERROR_FILE";
inline constexpr std::string_view peer_failure_note = "after a peer's failure";

// In the worker, when a collective fails on a peer that has gone: writes the note (and the
// error's first line, for a reader) to ACCEL_ERROR_FILE. Nothing without a launcher that asked.
ACCEL_DECL void note_failure_after_peer(std::string_view error) noexcept;

// Whether the worker noted a failure of a collective it did not cause; of a timeout it says
// nothing (a peer that stopped never fails itself, so the failure there is the first one).
ACCEL_DECL bool looks_like_peer_gone(std::string_view error);

// In the launcher, once the worker has exited: whether it left the note at `path`.
ACCEL_DECL bool failed_after_peer(const std::string& path);

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/failure_record.ipp"
#endif
