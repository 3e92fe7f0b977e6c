// Starting one worker: fork, then in the child everything that ties the worker to the launcher,
// then exec. The launcher learns whether exec worked through a close-on-exec pipe: end of file
// means the program runs, an errno means it could not start.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "error.hpp"
#include "file_descriptor.hpp"
#include "signal_watch.hpp"

namespace accel::launcher {

struct WorkerProcess {
  const std::string& program;                 // a path, or a name looked up in PATH
  const std::vector<std::string>& arguments;  // argv, argv[0] included
  const std::vector<std::string>& environment;
  int stdout_fd = -1;  // -1: the launcher's own
  int stderr_fd = -1;
};

ACCEL_DECL std::vector<char*> as_pointers(const std::vector<std::string>& strings);

// After fork(), in the child: only async-signal-safe calls, since the host program may have
// threads.
[[noreturn]] ACCEL_DECL void become_worker(const char* program, char* const* argv,
                                           char* const* envp, const WorkerProcess& worker,
                                           pid_t launcher, int stdin_fd, int exec_status_fd,
                                           const SignalWatch& signals,
                                           const sigset_t& mask_before_fork) noexcept;

// Returns the worker's pid once its program runs; throws LaunchError when it cannot start.
ACCEL_DECL pid_t spawn_worker(const WorkerProcess& worker, const SignalWatch& signals);

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/spawn.ipp"
#endif
