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

#include "../detail/separate_compilation.hpp"
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

ACCEL_DECL void write_signal_to_pipe(int signal, siginfo_t* info, void* /*context*/);

// The signals the launcher passes on to every worker.
inline constexpr std::array<int, 3> forwarded_signals = {SIGINT, SIGTERM, SIGHUP};

class SignalWatch {
 public:
  ACCEL_DECL SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  ACCEL_DECL ~SignalWatch();

  [[nodiscard]] int fd() const noexcept { return pipe_.read_end.get(); }

  // The signals received since the last call, in order.
  ACCEL_DECL std::vector<SignalRecord> drain();

  // In a forked worker before exec: the dispositions the launcher started with. Only
  // async-signal-safe calls.
  ACCEL_DECL void restore_in_child() const noexcept;

 private:
  static constexpr std::array<int, 5> watched = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};
  Pipe pipe_;
  std::array<struct sigaction, 5> saved_{};
};

// Blocks the watched signals around fork(), so that no handler runs in the child before it has
// put the old dispositions back; the child unblocks them itself, the parent on destruction.
class SignalsBlockedForFork {
 public:
  ACCEL_DECL SignalsBlockedForFork();
  SignalsBlockedForFork(const SignalsBlockedForFork&) = delete;
  SignalsBlockedForFork& operator=(const SignalsBlockedForFork&) = delete;
  ~SignalsBlockedForFork() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

  [[nodiscard]] const sigset_t& previous() const noexcept { return previous_; }

 private:
  sigset_t previous_;
};

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/signal_watch.ipp"
#endif
