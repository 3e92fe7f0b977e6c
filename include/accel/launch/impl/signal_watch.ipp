// SignalWatch and its handler; signal_watch.hpp includes it in header-only mode.
#pragma once

#include "../signal_watch.hpp"

namespace accel::launcher {

ACCEL_DECL void write_signal_to_pipe(int signal, siginfo_t* info, void* /*context*/) {
  const int saved_errno = errno;
  const int fd = signal_pipe_write_end.load();
  // A forked worker between fork() and exec() never writes into the launcher's pipe.
  if (fd >= 0 && ::getpid() == signal_pipe_owner.load()) {
    SignalRecord record{signal, 0};
    if (signal == SIGCHLD && info != nullptr &&
        (info->si_code == CLD_EXITED || info->si_code == CLD_KILLED || info->si_code == CLD_DUMPED))
      record.child = info->si_pid;
    // One write of less than PIPE_BUF bytes: whole or not at all, so records never tear. A full
    // pipe drops it: the launcher is already awake, and reaping finds the exit anyway.
    [[maybe_unused]] const auto written = ::write(fd, &record, sizeof record);
  }
  errno = saved_errno;
}

ACCEL_DECL SignalWatch::SignalWatch() {
  if (signal_pipe_write_end.load() >= 0)
    fail("a launch is already supervising workers in this process; launch one at a time");
  pipe_ = make_pipe();
  // The handler must never block; a full pipe already says "wake up".
  set_nonblocking(pipe_.read_end);
  set_nonblocking(pipe_.write_end);
  signal_pipe_owner = ::getpid();
  signal_pipe_write_end = pipe_.write_end.get();

  struct sigaction action {};
  action.sa_sigaction = &write_signal_to_pipe;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  for (std::size_t i = 0; i < forwarded_signals.size(); ++i) {
    const int signal = forwarded_signals[i];
    ::sigaction(signal, nullptr, &saved_[i]);
    // A signal ignored when we started (nohup, a background job) stays ignored, for the
    // launcher and, through exec, for the workers.
    if (saved_[i].sa_handler != SIG_IGN) ::sigaction(signal, &action, nullptr);
  }
  action.sa_flags = SA_RESTART | SA_SIGINFO | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &action, &saved_[3]);
  // Writing a prefixed line to a closed stdout must not kill the launcher (and, through
  // PR_SET_PDEATHSIG, every worker); the write fails with EPIPE instead.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &saved_[4]);
}

ACCEL_DECL SignalWatch::~SignalWatch() {
  for (std::size_t i = 0; i < watched.size(); ++i) ::sigaction(watched[i], &saved_[i], nullptr);
  signal_pipe_write_end = -1;
  signal_pipe_owner = 0;
}

ACCEL_DECL std::vector<SignalRecord> SignalWatch::drain() {
  std::vector<SignalRecord> signals;
  SignalRecord buffer[64];
  for (;;) {
    // Every write was one whole record, so a read of whole records returns whole records.
    const auto count = ::read(fd(), buffer, sizeof buffer);
    if (count > 0) {
      signals.insert(signals.end(), buffer,
                     buffer + static_cast<std::size_t>(count) / sizeof(SignalRecord));
      continue;
    }
    if (count < 0 && errno == EINTR) continue;
    return signals;
  }
}

ACCEL_DECL void SignalWatch::restore_in_child() const noexcept {
  for (std::size_t i = 0; i < watched.size(); ++i) ::sigaction(watched[i], &saved_[i], nullptr);
}

ACCEL_DECL SignalsBlockedForFork::SignalsBlockedForFork() {
  sigset_t blocked;
  sigemptyset(&blocked);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE})
    sigaddset(&blocked, signal);
  ::pthread_sigmask(SIG_BLOCK, &blocked, &previous_);
}

}  // namespace accel::launcher
