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

namespace accel::runtime::shm {

inline constexpr std::string_view segment_prefix = "accel-shm.";

// The token of a run that meets in a private folder ".../accel-XXXXXX" (accel-launch's
// ACCEL_STORE_DIR): the XXXXXX, unique on the host while the run lasts.
inline std::string run_token_of(std::string_view store_dir) {
  const auto slash = store_dir.find_last_of('/');
  std::string_view name = slash == std::string_view::npos ? store_dir : store_dir.substr(slash + 1);
  if (name.starts_with("accel-")) name.remove_prefix(6);
  return std::string(name);
}

inline std::string segment_name(std::string_view run_token, std::string_view group) {
  std::string name = "/";
  name.append(segment_prefix).append(run_token).append(".").append(group);
  return name;
}
inline std::string segment_name(std::string_view run_token, int group) {
  return segment_name(run_token, std::to_string(group));
}

// A name for a new segment of `group`, unguessable; `run_token` may be empty (no launcher to
// clean up after the run: torchrun, Slurm, mpirun).
inline std::string fresh_segment_name(std::string_view run_token, std::string_view group) {
  std::string name = "/";
  name.append(segment_prefix);
  if (!run_token.empty()) name.append(run_token).append(".");
  name.append(detail::random_hex(8)).append(".").append(group);
  return name;
}

// Whether `name` is one of accel's segment names (what a peer reads from the store).
inline bool is_segment_name(std::string_view name) {
  return name.starts_with("/") && name.substr(1).starts_with(segment_prefix) &&
         name.find('/', 1) == std::string_view::npos && name.size() < 256;
}

// Removes every segment name of the run: what a rank killed during set-up leaves behind (after
// set-up the names are gone already, transport.hpp).
inline void remove_segments_of_run(std::string_view run_token) {
  std::string start(segment_prefix);
  start.append(run_token).append(".");
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (!name.starts_with(start)) continue;
    std::string path = "/";
    path.append(name);
    ::shm_unlink(path.c_str());
  }
  ::closedir(dir);
}

}  // namespace accel::runtime::shm
