// The launcher's signals as records in a pipe (the self-pipe trick), so that one poll() waits for
// workers exiting (SIGCHLD), signals to forward (SIGINT, SIGTERM, SIGHUP) and worker output.
// A handler works whatever threads the host program has, which signalfd (it needs the signals
// blocked in every thread) does not.
//
// A SIGCHLD record names the child whose exit raised it (SA_SIGINFO). That is how the launcher
// knows which of several exits came first when it finds them at once: the kernel sends SIGCHLD
// when a child becomes a zombie, and while one SIGCHLD is pending the next ones merge into it,
// keeping the first one's siginfo. So the records name exits in the order they happened, each
// burst by its first member; Linux offers no exit timestamp (/proc has none for a zombie), and
// waitpid(-1) returns zombies in fork order, not exit order.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <vector>

#include "error.hpp"
#include "file_descriptor.hpp"

namespace accel::launcher {

// One signal as the handler saw it. `child`: for a SIGCHLD raised by a child's exit, that child;
// else 0.
struct SignalRecord {
  int signal = 0;
  pid_t child = 0;
};

inline std::atomic<int> signal_pipe_write_end{-1};
inline std::atomic<pid_t> signal_pipe_owner{0};

inline void write_signal_to_pipe(int signal, siginfo_t* info, void* /*context*/) {
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

// The signals the launcher passes on to every worker.
inline constexpr std::array<int, 3> forwarded_signals = {SIGINT, SIGTERM, SIGHUP};

class SignalWatch {
 public:
  SignalWatch() {
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
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  ~SignalWatch() {
    for (std::size_t i = 0; i < watched.size(); ++i) ::sigaction(watched[i], &saved_[i], nullptr);
    signal_pipe_write_end = -1;
    signal_pipe_owner = 0;
  }

  [[nodiscard]] int fd() const noexcept { return pipe_.read_end.get(); }

  // The signals received since the last call, in order.
  std::vector<SignalRecord> drain() {
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

  // In a forked worker before exec: the dispositions the launcher started with. Only
  // async-signal-safe calls.
  void restore_in_child() const noexcept {
    for (std::size_t i = 0; i < watched.size(); ++i) ::sigaction(watched[i], &saved_[i], nullptr);
  }

 private:
  static constexpr std::array<int, 5> watched = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};
  Pipe pipe_;
  std::array<struct sigaction, 5> saved_{};
};

// Blocks the watched signals around fork(), so that no handler runs in the child before it has
// put the old dispositions back; the child unblocks them itself, the parent on destruction.
class SignalsBlockedForFork {
 public:
  SignalsBlockedForFork() {
    sigset_t blocked;
    sigemptyset(&blocked);
    for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE})
      sigaddset(&blocked, signal);
    ::pthread_sigmask(SIG_BLOCK, &blocked, &previous_);
  }
  SignalsBlockedForFork(const SignalsBlockedForFork&) = delete;
  SignalsBlockedForFork& operator=(const SignalsBlockedForFork&) = delete;
  ~SignalsBlockedForFork() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

  [[nodiscard]] const sigset_t& previous() const noexcept { return previous_; }

 private:
  sigset_t previous_;
};

}  // namespace accel::launcher
