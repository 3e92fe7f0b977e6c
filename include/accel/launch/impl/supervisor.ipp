// Supervisor and launch_workers(); supervisor.hpp includes it in header-only mode.
// Longer than accel's files should be: the members of one class (supervisor.hpp), one state
// machine over the workers (start, exits, signals, restarts, output, the report).
#pragma once

#include "../supervisor.hpp"

namespace accel::launcher {

ACCEL_DECL std::uint64_t& FlagsByPid::operator[](pid_t id) {
  for (auto& [key, bits] : entries_)
    if (key == id) return bits;
  return entries_.emplace_back(id, 0).second;
}

ACCEL_DECL std::uint64_t FlagsByPid::at(pid_t id) const {
  for (const auto& [key, bits] : entries_)
    if (key == id) return bits;
  return 0;
}

ACCEL_DECL int Supervisor::run(const std::string& program,
                               const std::vector<std::string>& arguments) {
  SignalWatch signals;
  const ChildSubreaper subreaper;
  start_workers(program, arguments, signals);
  for (;;) {
    for (const int signal : note_exits(signals.drain())) on_launcher_signal(signal);
    if (!reap_exited(signals)) break;  // no child left: every worker and descendant is gone
    settle_deferred();
    if (phase_ == Phase::running && all_workers_exited()) begin_stopping(SIGTERM);
    if (phase_ == Phase::stopping && Clock::now() >= deadline_)
      begin_killing("still running after the " + format_seconds(options_.grace) +
                    " s grace period");
    if (phase_ != Phase::running)
      signal_everything(phase_ == Phase::killing ? SIGKILL : stop_signal_);
    wait_for_events(signals);
  }
  for (PrefixedStream& stream : streams_)
    if (stream.open()) drain(stream);
  flush_output(signals, "the workers' output");
  report();
  flush_output(signals, "the launcher's summary");
  return exit_status();
}

ACCEL_DECL void Supervisor::start_workers(const std::string& program,
                                          const std::vector<std::string>& arguments,
                                          const SignalWatch& signals) {
  for (int local_rank = 0; local_rank < options_.nproc; ++local_rank) {
    const int rank = options_.node_rank * options_.nproc + local_rank;
    const std::vector<std::string> environment =
        worker_environment(with_restart_count(
            with_worker_threads(worker_variables(options_, rendezvous_, local_rank), options_),
            options_, restart_));  // threads.hpp, restarts.hpp
    std::optional<Pipe> out;
    std::optional<Pipe> err;
    try {
      if (options_.rank_prefix) {
        out = make_pipe();
        err = make_pipe();
        set_nonblocking(out->read_end);
        set_nonblocking(err->read_end);
      }
      const WorkerProcess process{program, arguments, environment,
                                  out ? out->write_end.get() : -1,
                                  err ? err->write_end.get() : -1};
      const pid_t pid = spawn_worker(process, signals);
      workers_.push_back({rank, pid});
    } catch (const LaunchError& error) {
      output_.err().write(std::string(error.what()) + "\n");
      cause_ = Cause::start_failed;
      failed_start_rank_ = rank;
      begin_stopping(SIGTERM);
      return;
    }
    if (out) {
      streams_.emplace_back(std::move(out->read_end), output_.out(), rank);
      streams_.emplace_back(std::move(err->read_end), output_.err(), rank);
    }
  }
}

ACCEL_DECL std::vector<int> Supervisor::note_exits(const std::vector<SignalRecord>& records) {
  std::vector<int> other_signals;
  for (const SignalRecord& record : records) {
    if (record.signal != SIGCHLD)
      other_signals.push_back(record.signal);
    else if (Worker* worker = running_worker(record.child))
      note_exit(*worker);
  }
  return other_signals;
}

ACCEL_DECL bool Supervisor::reap_exited(SignalWatch& signals) {
  std::vector<ChildExit> exits;
  bool children_left = true;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      exits.push_back({pid, status});
    } else if (pid == 0) {
      break;
    } else if (errno != EINTR) {
      children_left = false;  // ECHILD
      break;
    }
  }
  // The records of this pass's exits; a signal to forward that came meanwhile acts after the
  // exits, which came first.
  const std::vector<int> later_signals = note_exits(signals.drain());
  on_exits(exits);
  for (const int signal : later_signals) on_launcher_signal(signal);
  return children_left;
}

ACCEL_DECL void Supervisor::note_exit(Worker& worker) {
  if (worker.exit_order == 0) worker.exit_order = ++exits_noticed_;
}

ACCEL_DECL Supervisor::Worker* Supervisor::running_worker(pid_t pid) {
  for (Worker& worker : workers_)
    if (worker.pid == pid && !worker.exited) return &worker;
  return nullptr;
}

ACCEL_DECL void Supervisor::on_exits(const std::vector<ChildExit>& exits) {
  Worker* first_failure = nullptr;
  Worker* first_own_failure = nullptr;
  for (const ChildExit& exit : exits) {
    Worker* worker = running_worker(exit.pid);
    if (worker == nullptr) continue;  // a descendant left behind
    note_exit(*worker);               // no record: after the recorded ones, in reap order
    worker->exited = true;
    worker->wait_status = exit.wait_status;
    if (!failed(exit.wait_status)) continue;
    worker->after_peer = !rendezvous_.error_dir.empty() &&
                         runtime::failed_after_peer(error_file(rendezvous_, worker->rank));
    if (first_failure == nullptr || worker->exit_order < first_failure->exit_order)
      first_failure = worker;
    if (!worker->after_peer &&
        (first_own_failure == nullptr || worker->exit_order < first_own_failure->exit_order))
      first_own_failure = worker;
  }
  if (cause_ != Cause::none) return;
  if (first_own_failure != nullptr) {
    blame(*first_own_failure);
  } else if (first_failure != nullptr && !deferred_) {
    deferred_ = index_of(*first_failure);
    defer_until_ = Clock::now() + peer_failure_wait;
  }
  settle_deferred();
}

ACCEL_DECL void Supervisor::settle_deferred() {
  if (deferred_ && (Clock::now() >= defer_until_ || all_workers_exited()))
    blame(workers_[*deferred_]);
}

ACCEL_DECL void Supervisor::blame(const Worker& worker) {
  deferred_.reset();
  cause_ = Cause::worker_failed;
  failed_worker_ = index_of(worker);
  begin_stopping(SIGTERM);
}

ACCEL_DECL void Supervisor::on_launcher_signal(int signal) {
  if (deferred_) blame(workers_[*deferred_]);  // a worker failed before the signal came
  if (phase_ == Phase::running) {
    if (cause_ == Cause::none) {
      cause_ = Cause::signal_received;
      received_signal_ = signal;
    }
    begin_stopping(signal);
  } else if (phase_ == Phase::stopping) {
    // Ctrl-C while the workers are being stopped (a second one, typically) means now.
    begin_killing(signal_name(signal) + " to the launcher while stopping");
  }
}

ACCEL_DECL bool Supervisor::all_workers_exited() const {
  for (const Worker& worker : workers_)
    if (!worker.exited) return false;
  return true;
}

ACCEL_DECL void Supervisor::begin_stopping(int signal) {
  phase_ = Phase::stopping;
  stop_signal_ = signal;
  deadline_ = Clock::now() + options_.grace;
  signal_everything(signal);
}

ACCEL_DECL void Supervisor::begin_killing(std::string reason) {
  phase_ = Phase::killing;
  kill_reason_ = std::move(reason);
  signal_everything(SIGKILL);
}

ACCEL_DECL void Supervisor::signal_everything(int signal) {
  const std::uint64_t bit = signal_bit(signal);
  const auto send = [signal](pid_t target) {
    ::kill(target, signal);
    if (signal != SIGKILL) ::kill(target, SIGCONT);
  };
  const auto send_to_group = [&](pid_t group) {
    if (group <= 0 || group == own_group_) return;
    if ((signaled_groups_[group] & bit) != 0 && signal != SIGKILL) return;
    send(-group);
    signaled_groups_[group] |= bit;
  };
  for (const Worker& worker : workers_)
    if (!worker.exited) send_to_group(worker.pid);
  for (const ChildProcess& child : children_of(own_pid_)) {
    if (is_worker(child.pid)) continue;
    leftovers_[child.pid] |= 1;  // seen
    const bool group_already_signaled = (signaled_groups_[child.process_group] & bit) != 0;
    send_to_group(child.process_group);
    if ((signaled_pids_[child.pid] & bit) == 0 && (!group_already_signaled || signal == SIGKILL))
      send(child.pid);
    signaled_pids_[child.pid] |= bit;
  }
}

ACCEL_DECL bool Supervisor::is_worker(pid_t pid) const {
  for (const Worker& worker : workers_)
    if (worker.pid == pid && !worker.exited) return true;
  return false;
}

ACCEL_DECL void Supervisor::wait_for_events(const SignalWatch& signals) {
  std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}, {output_.wake_fd(), POLLIN, 0}};
  std::vector<PrefixedStream*> polled;
  for (PrefixedStream& stream : streams_) {
    if (!stream.open() || !stream.wanted()) continue;
    fds.push_back({stream.fd(), POLLIN, 0});
    polled.push_back(&stream);
  }
  int timeout_ms = -1;
  if (deferred_) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(defer_until_ - Clock::now());
    timeout_ms = left.count() > 0 ? static_cast<int>(left.count()) : 0;
  } else if (phase_ == Phase::stopping) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now());
    timeout_ms = left.count() > 0 ? static_cast<int>(left.count()) : 0;
  } else if (phase_ == Phase::killing) {
    timeout_ms = 100;  // a safety net; every exit also wakes us through SIGCHLD
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  if (fds[1].revents != 0) output_.clear_wakes();
  for (std::size_t i = 2; i < fds.size(); ++i)
    if (fds[i].revents != 0) polled[i - 2]->read_available();
}

ACCEL_DECL void Supervisor::drain(PrefixedStream& stream) {
  for (int rounds = 0; stream.open() && rounds < 1000; ++rounds) {
    pollfd ready{stream.fd(), POLLIN, 0};
    if (::poll(&ready, 1, 100) <= 0) break;
    stream.read_available(true);
  }
  if (stream.open()) stream.finish();
}

ACCEL_DECL void Supervisor::flush_output(SignalWatch& signals, const std::string& what) {
  bool bounded = cause_ != Cause::none;
  for (;;) {
    const auto now = Clock::now();
    std::chrono::milliseconds wait = stuck_output_limit;
    bool pending = false;
    for (const int destination : {STDOUT_FILENO, STDERR_FILENO}) {
      OutputChannel& channel = output_.channel(destination);
      if (channel.idle()) continue;
      const auto stalled = channel.stalled(now);
      if (!bounded || stalled < stuck_output_limit) {
        pending = true;
        wait = std::min(
            wait, std::chrono::ceil<std::chrono::milliseconds>(stuck_output_limit - stalled));
        continue;
      }
      const std::size_t dropped = channel.give_up();
      output_.err().write(
          std::string(summary_prefix) + "dropped " + std::to_string(dropped) + " bytes of " +
          what + ": " + (destination == STDOUT_FILENO ? "stdout" : "stderr") +
          " took nothing for " + format_seconds(std::chrono::milliseconds(stuck_output_limit)) +
          " s (is anyone reading it?)\n");
    }
    if (!pending) return;
    std::array<pollfd, 2> fds{{{signals.fd(), POLLIN, 0}, {output_.wake_fd(), POLLIN, 0}}};
    ::poll(fds.data(), fds.size(), bounded ? static_cast<int>(wait.count()) + 1 : -1);
    output_.clear_wakes();
    for (const SignalRecord& record : signals.drain())
      if (record.signal != SIGCHLD) {
        bounded = true;
        output_.out().give_up();
        output_.err().give_up();
      }
  }
}

ACCEL_DECL std::string Supervisor::describe(const Worker& worker) const {
  const int status = worker.wait_status;
  const std::uint64_t sent = signaled_groups_.at(worker.pid);
  if (WIFEXITED(status)) {
    std::string text = WEXITSTATUS(status) == 0
                           ? "exited with code 0"
                           : "exit code " + std::to_string(WEXITSTATUS(status));
    if (sent != 0)
      text += (cause_ == Cause::signal_received ? " after the forwarded "
                                                : " after the launcher's ") +
              signal_name(stop_signal_);
    if (worker.after_peer) text += " (its collective failed: a peer had gone)";
    return text;
  }
  const int signal = WTERMSIG(status);
  if ((sent & signal_bit(signal)) == 0) return "killed by signal " + signal_name(signal);
  if (signal == SIGKILL) return "killed by the launcher with SIGKILL (" + kill_reason_ + ")";
  if (cause_ == Cause::signal_received)
    return "terminated by the forwarded " + signal_name(signal);
  return "terminated by the launcher with " + signal_name(signal);
}

ACCEL_DECL std::string Supervisor::failed_worker() const {
  if (cause_ != Cause::worker_failed) return {};
  const Worker& root = workers_[failed_worker_];
  const std::string how = WIFEXITED(root.wait_status)
                              ? "exit code " + std::to_string(WEXITSTATUS(root.wait_status))
                              : "killed by signal " + signal_name(WTERMSIG(root.wait_status));
  return worker_name(root) + " failed first: " + how;
}

ACCEL_DECL void Supervisor::report() {
  std::string text;
  const auto line = [&](const std::string& content) {
    text += summary_prefix;
    text += content;
    text += '\n';
  };
  if (cause_ == Cause::worker_failed) {
    line(failed_worker() + " (root cause)");
  } else if (cause_ == Cause::signal_received) {
    line("received " + signal_name(received_signal_) +
         " and forwarded it to every worker (root cause)");
  } else if (cause_ == Cause::start_failed) {
    line("rank " + std::to_string(failed_start_rank_) + " could not start (root cause)");
  }
  if (cause_ != Cause::none) {
    for (std::size_t i = 0; i < workers_.size(); ++i)
      if (cause_ != Cause::worker_failed || i != failed_worker_)
        line(worker_name(workers_[i]) + ": " + describe(workers_[i]));
  }
  // After a failure, stopping the workers' children is part of stopping the workers.
  if (cause_ == Cause::none && leftovers_.size() != 0)
    line("stopped " + std::to_string(leftovers_.size()) + " process" +
         (leftovers_.size() == 1 ? "" : "es") +
         " that the workers had left running (nothing outlives a launch)");
  if (cause_ != Cause::none) line("exiting with status " + std::to_string(exit_status()));
  output_.err().write(std::move(text));
}

ACCEL_DECL int Supervisor::exit_status() const {
  switch (cause_) {
    case Cause::worker_failed:
      return shell_status(workers_[failed_worker_].wait_status);
    case Cause::signal_received:
      return 128 + received_signal_;
    case Cause::start_failed:
      return 127;
    case Cause::none:
      break;
  }
  return 0;
}

}  // namespace accel::launcher

namespace accel {

ACCEL_DECL int launch_workers(const LaunchOptions& options, const std::string& program,
                              const std::vector<std::string>& arguments) {
  launcher::validate(options);
  if (arguments.empty())
    launcher::fail("no arguments for '" + program + "'; argv[0] comes first, e.g. {\"./train\"}");
  launcher::announce_worker_threads(options);
  launcher::RestartReport report;
  const auto summarize = [&] {
    for (const std::string& line : report.summary())
      std::fprintf(stderr, "accel-launch: %s\n", line.c_str());
  };
  std::optional<launcher::NodeRendezvous> nodes;  // several nodes meet before each start
  if (launcher::nodes_meet(options)) nodes.emplace(options);
  LaunchOptions current = options;
  for (int restart = 0;; ++restart) {
    if (nodes) {
      try {
        nodes->enter_start(restart, current);
      } catch (const LaunchError&) {
        summarize();  // what the starts before cost, then the reason this one cannot be made
        throw;
      }
    }
    // Every start meets afresh: a new private folder (on one node, the store's), a new free
    // port, a new run id.
    const launcher::PrivateDirectory folder = launcher::PrivateDirectory::create();
    const launcher::Rendezvous rendezvous = launcher::resolve_rendezvous(current, folder.path());
    launcher::Supervisor supervisor(current, rendezvous, restart);
    const int status = supervisor.run(program, arguments);
    report.add_start(supervisor.failed_worker(), runtime::read_progress(rendezvous.progress_file),
                     launcher::world_size(current), current.nnodes);
    if (status == 0 || !supervisor.restartable() || options.max_restarts == 0) {
      summarize();
      return status;
    }
    if (restart == options.max_restarts) {
      std::fprintf(stderr, "accel-launch: giving up after %d restart%s (--max-restarts %d)\n",
                   restart, restart == 1 ? "" : "s", options.max_restarts);
      summarize();
      return status;
    }
    if (const std::string progress = report.before_restart(); !progress.empty())
      std::fprintf(stderr, "accel-launch: %s\n", progress.c_str());
    std::fprintf(stderr,
                 "accel-launch: restart %d of %d: starting every worker again "
                 "(ACCEL_RESTART_COUNT=%d)\n",
                 restart + 1, options.max_restarts, restart + 1);
  }
}

ACCEL_DECL int launch_workers(const LaunchOptions& options,
                              const std::vector<std::string>& command) {
  if (command.empty())
    launcher::fail("no command to launch; give the program and its arguments, e.g. {\"./train\"}");
  return launch_workers(options, command.front(), command);
}

}  // namespace accel
