// Starting a worker; spawn.hpp includes it in header-only mode.
#pragma once

#include "../spawn.hpp"

namespace accel::launcher {

ACCEL_DECL std::vector<char*> as_pointers(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& text : strings) pointers.push_back(const_cast<char*>(text.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

ACCEL_DECL void become_worker(const char* program, char* const* argv, char* const* envp,
                              const WorkerProcess& worker, pid_t launcher, int stdin_fd,
                              int exec_status_fd, const SignalWatch& signals,
                              const sigset_t& mask_before_fork) noexcept {
  // Its own process group, so that one kill(-pid) reaches the worker and everything it starts,
  // and a terminal's Ctrl-C reaches only the launcher, which forwards it.
  ::setpgid(0, 0);
  // Dies with the launcher; if the launcher died before this line, the parent has changed.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(127);
  signals.restore_in_child();
  ::pthread_sigmask(SIG_SETMASK, &mask_before_fork, nullptr);
  // Workers run in background process groups: reading a terminal would stop them (SIGTTIN).
  ::dup2(stdin_fd, STDIN_FILENO);
  if (worker.stdout_fd >= 0) ::dup2(worker.stdout_fd, STDOUT_FILENO);
  if (worker.stderr_fd >= 0) ::dup2(worker.stderr_fd, STDERR_FILENO);
  ::execvpe(program, argv, envp);
  const int error = errno;
  [[maybe_unused]] const auto written = ::write(exec_status_fd, &error, sizeof error);
  ::_exit(127);
}

ACCEL_DECL pid_t spawn_worker(const WorkerProcess& worker, const SignalWatch& signals) {
  std::vector<char*> argv = as_pointers(worker.arguments);
  std::vector<char*> envp = as_pointers(worker.environment);
  const FileDescriptor dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) fail_with_errno("cannot open /dev/null for the workers' standard input");
  Pipe exec_status = make_pipe();
  const pid_t launcher = ::getpid();

  pid_t pid = -1;
  {
    const SignalsBlockedForFork blocked;
    pid = ::fork();
    if (pid == 0)
      become_worker(worker.program.c_str(), argv.data(), envp.data(), worker, launcher,
                    dev_null.get(), exec_status.write_end.get(), signals, blocked.previous());
  }
  if (pid < 0) fail_with_errno("cannot fork a worker process");
  // Also set by the child: whichever runs first, the group exists before anyone signals it.
  ::setpgid(pid, pid);

  exec_status.write_end.reset();
  int error = 0;
  ssize_t count = 0;
  do {
    count = ::read(exec_status.read_end.get(), &error, sizeof error);
  } while (count < 0 && errno == EINTR);
  if (count == static_cast<ssize_t>(sizeof error)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    fail("cannot run '" + worker.program + "': " + std::generic_category().message(error) +
         "; check the command (a path, or a program found in PATH) and that it is executable");
  }
  return pid;
}

}  // namespace accel::launcher
