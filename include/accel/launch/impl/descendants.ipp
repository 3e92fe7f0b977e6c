// The process tree and the subreaper; descendants.hpp includes it in header-only mode.
#pragma once

#include "../descendants.hpp"

namespace accel::launcher {

ACCEL_DECL bool read_parent_and_group(pid_t pid, pid_t& parent, pid_t& group) {
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // already gone
  char buffer[1024];
  const auto count = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (count <= 0) return false;
  const std::string stat(buffer, static_cast<std::size_t>(count));
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return false;
  char state = 0;
  long ppid = 0;
  long pgrp = 0;
  if (std::sscanf(stat.c_str() + close + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) return false;
  parent = static_cast<pid_t>(ppid);
  group = static_cast<pid_t>(pgrp);
  return true;
}

ACCEL_DECL std::vector<ChildProcess> children_of(pid_t parent) {
  std::vector<ChildProcess> children;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  while (const dirent* entry = ::readdir(proc)) {
    if (!std::isdigit(static_cast<unsigned char>(entry->d_name[0]))) continue;
    const auto pid = static_cast<pid_t>(std::stol(entry->d_name));
    pid_t ppid = 0;
    pid_t group = 0;
    if (read_parent_and_group(pid, ppid, group) && ppid == parent) children.push_back({pid, group});
  }
  ::closedir(proc);
  return children;
}

ACCEL_DECL ChildSubreaper::ChildSubreaper() {
  ::prctl(PR_GET_CHILD_SUBREAPER, &previous_);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

ACCEL_DECL ChildSubreaper::~ChildSubreaper() {
  if (previous_ == 0) ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace accel::launcher
