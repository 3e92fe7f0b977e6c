// Starting the workers of one node and watching them until every process of the launch is gone.
//
// The first worker to fail (non-zero exit or a signal) is the root cause: every other worker's
// process group gets SIGTERM, then SIGKILL once the grace period is over. "First" is the order
// of the exits themselves, not of reaping (see reap_exited()), except that a worker which noted
// that its failure followed a peer's (runtime/failure_record.hpp) gives way to one that did not
// (see on_exits()). SIGINT, SIGTERM and
// SIGHUP sent to the launcher are forwarded the same way. Processes the workers leave behind
// (the launcher is their subreaper) are stopped too, so a launch ends with no orphan and no
// zombie. The launcher exits with the root cause's status and names it on stderr.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../detail/random_hex.hpp"
#include "../detail/separate_compilation.hpp"
#include "../runtime/failure_record.hpp"
#include "descendants.hpp"
#include "environment.hpp"
#include "error.hpp"
#include "file_descriptor.hpp"
#include "free_port.hpp"
#include "node_rendezvous.hpp"
#include "options.hpp"
#include "output.hpp"
#include "private_directory.hpp"
#include "rank_prefix.hpp"
#include "signal_names.hpp"
#include "signal_watch.hpp"
#include "restart_report.hpp"
#include "restarts.hpp"
#include "spawn.hpp"
#include "threads.hpp"

namespace accel {
namespace launcher {

using Clock = std::chrono::steady_clock;

// Every line the launcher itself writes starts with this, whether it runs as accel-launch or
// inside a program through accel::launch().
inline constexpr std::string_view summary_prefix = "accel-launch: ";

// How long a failure that followed a peer's waits for that peer's own (on_exits()): the peer
// closed its connections, so its process is ending; a torch process takes tens to hundreds of
// milliseconds to do so, more on a loaded machine.
inline constexpr std::chrono::milliseconds peer_failure_wait = std::chrono::seconds(2);

inline std::uint64_t signal_bit(int signal) { return std::uint64_t{1} << (signal & 63); }

// A bit set per process (or process group) id: the signals sent to it. A launch has a handful of
// entries, so a vector is enough, and it keeps <map> out of a header that should compile fast.
class FlagsByPid {
 public:
  ACCEL_DECL std::uint64_t& operator[](pid_t id);
  [[nodiscard]] ACCEL_DECL std::uint64_t at(pid_t id) const;
  [[nodiscard]] std::size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<pid_t, std::uint64_t>> entries_;
};

inline bool failed(int wait_status) {
  return !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
}

// How a shell reports a status: the exit code, or 128 + the signal's number.
inline int shell_status(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

class Supervisor {
 public:
  // `restart`: 0 for the first start of the group, then 1, 2, ... (restarts.hpp).
  Supervisor(const LaunchOptions& options, Rendezvous rendezvous, int restart = 0)
      : options_(options), rendezvous_(std::move(rendezvous)), restart_(restart) {}

  // After run(): whether starting the group again may help, i.e. a worker failed (not a signal
  // to the launcher, not a worker that could not start).
  [[nodiscard]] bool restartable() const { return cause_ == Cause::worker_failed; }
  // After run(): "rank 1 (pid 123) failed first: killed by signal SIGKILL"; empty when no
  // worker failed.
  [[nodiscard]] ACCEL_DECL std::string failed_worker() const;

  ACCEL_DECL int run(const std::string& program, const std::vector<std::string>& arguments);

 private:
  enum class Phase { running, stopping, killing };
  enum class Cause { none, worker_failed, signal_received, start_failed };

  struct Worker {
    int rank = 0;
    pid_t pid = 0;
    bool exited = false;
    int wait_status = 0;
    // When its exit was noticed, as a count of noticed exits: 1 came first (0: not yet).
    std::uint64_t exit_order = 0;
    // It failed, and noted that its collective had failed because a peer had gone.
    bool after_peer = false;
  };

  struct ChildExit {
    pid_t pid = 0;
    int wait_status = 0;
  };

  ACCEL_DECL void start_workers(const std::string& program,
                                const std::vector<std::string>& arguments,
                                const SignalWatch& signals);

  // Numbers the workers' exits in the order their SIGCHLD records came; returns the other
  // signals, in order, for the caller to act on.
  ACCEL_DECL std::vector<int> note_exits(const std::vector<SignalRecord>& records);

  // Reaps every child that has exited, workers and reparented descendants alike, in one pass,
  // then judges the exits together. waitpid(-1) returns zombies in fork order (rank 0 first),
  // so when rank 1 fails and rank 0 fails 2 ms later on the broken connection, a launcher that
  // wakes after both must not take the first one reaped for the first one to fail. The SIGCHLD
  // records give the order of the exits (signal_watch.hpp): a worker whose record came earlier
  // exited earlier. A worker without a record exited while an earlier SIGCHLD was still pending
  // (its own merged into it), or so recently that its record is not read yet: either way after
  // the exit that raised that SIGCHLD, so it is numbered after the recorded ones. False when
  // this process has no child left.
  ACCEL_DECL bool reap_exited(SignalWatch& signals);

  ACCEL_DECL void note_exit(Worker& worker);

  // A worker that has not been reaped yet, by pid.
  ACCEL_DECL Worker* running_worker(pid_t pid);

  // The root cause is the failure that was noticed first. Once there is one, the launcher is
  // stopping the rest, so a later failure is never preferred to it, and a worker that the
  // launcher signaled can never be taken for the root cause.
  //
  // Except for a failure that the worker noted as following a peer's (its collective broke on
  // a connection the peer closed): the peer failed first, and is most likely exiting right now,
  // but its process may take longer to end than this one's (a rank that throws closes its Gloo
  // connections while it unwinds, long before its process is gone). Such a failure is held back
  // for up to peer_failure_wait while the group keeps running, and a failure without the note
  // in that time is the root cause. Only if none comes is the held one named.
  ACCEL_DECL void on_exits(const std::vector<ChildExit>& exits);

  // A failure held back (on_exits()) is named once its time is up, or once every worker has
  // exited without a failure of its own.
  ACCEL_DECL void settle_deferred();

  ACCEL_DECL void blame(const Worker& worker);

  [[nodiscard]] std::size_t index_of(const Worker& worker) const {
    return static_cast<std::size_t>(&worker - workers_.data());
  }

  ACCEL_DECL void on_launcher_signal(int signal);

  [[nodiscard]] ACCEL_DECL bool all_workers_exited() const;

  ACCEL_DECL void begin_stopping(int signal);

  ACCEL_DECL void begin_killing(std::string reason);

  // Sends `signal` to every running worker's process group and to every other child of the
  // launcher (a descendant left behind by a worker that has exited) and its group. Each group
  // and process gets a given signal once; SIGKILL is repeated, since it costs nothing. Any other
  // signal is followed by SIGCONT, as systemd does: a stopped process (SIGSTOP, a debugger's
  // stop) would otherwise hold the signal until the grace period ends in SIGKILL.
  ACCEL_DECL void signal_everything(int signal);

  [[nodiscard]] ACCEL_DECL bool is_worker(pid_t pid) const;

  // Waits for a signal, a worker's output, or room in a full output buffer. A pipe whose
  // destination is full is left alone (back-pressure); everything else is watched regardless.
  ACCEL_DECL void wait_for_events(const SignalWatch& signals);

  // After the last process is gone nobody holds a write end any more: read to the end, past
  // the output bound (a pipe holds no more than its capacity).
  ACCEL_DECL static void drain(PrefixedStream& stream);

  // Every process is gone; the output threads write what is left. After a success the launcher
  // waits for as long as that takes, like a worker writing to the same reader would. After a
  // failure or a signal the group is down and only output holds the launcher: a destination that
  // takes nothing for stuck_output_limit (a pipe nobody reads) is given up, and so is all of it
  // when a signal comes. What is given up is dropped, as a killed worker's unwritten output is.
  ACCEL_DECL void flush_output(SignalWatch& signals, const std::string& what);

  [[nodiscard]] ACCEL_DECL std::string describe(const Worker& worker) const;

  [[nodiscard]] std::string worker_name(const Worker& worker) const {
    return "rank " + std::to_string(worker.rank) + " (pid " + std::to_string(worker.pid) + ")";
  }

  ACCEL_DECL void report();

  [[nodiscard]] ACCEL_DECL int exit_status() const;

  const LaunchOptions& options_;
  Rendezvous rendezvous_;
  int restart_ = 0;
  LauncherOutput output_;
  const pid_t own_pid_ = ::getpid();
  const pid_t own_group_ = ::getpgrp();
  std::vector<Worker> workers_;
  std::vector<PrefixedStream> streams_;
  Phase phase_ = Phase::running;
  Cause cause_ = Cause::none;
  std::size_t failed_worker_ = 0;
  std::optional<std::size_t> deferred_;  // a failure after a peer's, held back (on_exits())
  Clock::time_point defer_until_{};
  std::uint64_t exits_noticed_ = 0;
  int received_signal_ = 0;
  int failed_start_rank_ = 0;
  int stop_signal_ = SIGTERM;
  Clock::time_point deadline_{};
  std::string kill_reason_;
  FlagsByPid signaled_groups_;
  FlagsByPid signaled_pids_;
  FlagsByPid leftovers_;  // the processes, other than workers, found among the children
};

}  // namespace launcher

// Starts `program` (a path, or a name looked up in PATH) as options.nproc workers with argv
// `arguments` (argv[0] included) and supervises them until every process of the launch is gone.
// Returns the launcher's exit status: 0 when every worker exited with 0, else the root cause's
// exit code or 128 + its signal (127 when a worker could not start). Throws LaunchError for bad
// options, before starting anything.
ACCEL_DECL int launch_workers(const LaunchOptions& options, const std::string& program,
                              const std::vector<std::string>& arguments);

// accel-launch's form: `command` is COMMAND ARGS...
ACCEL_DECL int launch_workers(const LaunchOptions& options,
                              const std::vector<std::string>& command);

}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/supervisor.ipp"
#endif
