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

namespace accel::runtime {

inline constexpr const char* error_file_variable = "ACCEL_ERROR_FILE";
inline constexpr std::string_view peer_failure_note = "after a peer's failure";

// In the worker, when a collective fails on a peer that has gone: writes the note (and the
// error's first line, for a reader) to ACCEL_ERROR_FILE. Nothing without a launcher that asked.
inline void note_failure_after_peer(std::string_view error) noexcept {
  const char* path = std::getenv(error_file_variable);
  if (path == nullptr || *path == '\0') return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;  // noted already (the first note stays), or nowhere to write
  std::string text(peer_failure_note);
  text.append("\n").append(error.substr(0, error.find('\n'))).append("\n");
  [[maybe_unused]] const auto written = ::write(fd, text.data(), text.size());
  ::close(fd);
}

// Whether the worker noted a failure of a collective it did not cause; of a timeout it says
// nothing (a peer that stopped never fails itself, so the failure there is the first one).
inline bool looks_like_peer_gone(std::string_view error) {
  for (const std::string_view timeout : {"imed out", "imeout"})
    if (error.find(timeout) != std::string_view::npos) return false;
  return true;
}

// In the launcher, once the worker has exited: whether it left the note at `path`.
inline bool failed_after_peer(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[64] = {};
  const auto count = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  return count > 0 && std::string_view(text, static_cast<std::size_t>(count))
                          .starts_with(peer_failure_note);
}

}  // namespace accel::runtime
