// The names of a run's shared-memory segments, "/accel-shm.<run token>.<group>", and their
// removal. No dependency beyond POSIX: the launcher removes a crashed run's segments with it.
#pragma once

#include <dirent.h>
#include <sys/mman.h>

#include <string>
#include <string_view>

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
