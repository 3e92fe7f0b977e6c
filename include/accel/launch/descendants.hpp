// The launcher's own children as /proc lists them. As a child subreaper it inherits every
// orphan below it, so after a worker dies its leftover descendants show up here, and a process
// that left the worker's process group (setsid) can still be found and stopped.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "../detail/separate_compilation.hpp"

namespace accel::launcher {

struct ChildProcess {
  pid_t pid = 0;
  pid_t process_group = 0;
};

// /proc/<pid>/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses, so
// fields are counted from the last ')'.
ACCEL_DECL bool read_parent_and_group(pid_t pid, pid_t& parent, pid_t& group);

ACCEL_DECL std::vector<ChildProcess> children_of(pid_t parent);

// Makes this process the reaper of every orphan below it for its lifetime: a worker's children
// and grandchildren are reparented here, not to init, when the worker dies.
class ChildSubreaper {
 public:
  ACCEL_DECL ChildSubreaper();
  ChildSubreaper(const ChildSubreaper&) = delete;
  ChildSubreaper& operator=(const ChildSubreaper&) = delete;
  ACCEL_DECL ~ChildSubreaper();

 private:
  int previous_ = 0;
};

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/descendants.ipp"
#endif
