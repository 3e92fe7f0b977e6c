// The segment names and their clean-up; segment_name.hpp includes it in header-only mode.
#pragma once

#include "../segment_name.hpp"

namespace accel::runtime::shm {

ACCEL_DECL std::string run_token_of(std::string_view store_dir) {
  const auto slash = store_dir.find_last_of('/');
  std::string_view name = slash == std::string_view::npos ? store_dir : store_dir.substr(slash + 1);
  if (name.starts_with("accel-")) name.remove_prefix(6);
  return std::string(name);
}

ACCEL_DECL std::string segment_name(std::string_view run_token, std::string_view group) {
  std::string name = "/";
  name.append(segment_prefix).append(run_token).append(".").append(group);
  return name;
}

ACCEL_DECL std::string fresh_segment_name(std::string_view run_token, std::string_view group) {
  std::string name = "/";
  name.append(segment_prefix);
  if (!run_token.empty()) name.append(run_token).append(".");
  name.append(accel::detail::random_hex(8)).append(".").append(group);
  return name;
}

ACCEL_DECL bool is_segment_name(std::string_view name) {
  return name.starts_with("/") && name.substr(1).starts_with(segment_prefix) &&
         name.find('/', 1) == std::string_view::npos && name.size() < 256;
}

ACCEL_DECL void remove_segments_of_run(std::string_view run_token) {
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
