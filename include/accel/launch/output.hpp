// The launcher's own stdout and stderr, each written by a thread of its own from a bounded
// buffer. Supervision (noticing a failure, forwarding a signal, stopping the group) must never
// wait on a reader: a pipe nobody drains or a slow terminal would otherwise hold the launcher in
// write() while a failed group keeps running. A thread rather than O_NONBLOCK on the launcher's
// stdout because that flag belongs to the open file description, which the launcher shares with
// its shell and whatever else writes to the same terminal or pipe; a launcher killed before it
// put the flag back would leave them with a non-blocking terminal (EAGAIN in the next `cat`).
//
// When a buffer is full, the supervisor stops reading the workers' pipes that feed it, so those
// workers wait in their own write() (back-pressure, as when they write to a slow terminal
// directly); supervision goes on.
#pragma once

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "../detail/separate_compilation.hpp"
#include "error.hpp"
#include "file_descriptor.hpp"

namespace accel::launcher {

// What the launcher holds for one destination before it stops reading the workers that feed it.
inline constexpr std::size_t output_buffer_bytes = std::size_t{1} << 20;
// The most one write() is given: the writer sees progress at least this often, so that a slow
// terminal (a serial console takes ~10 KB/s) is not mistaken for a stuck one.
inline constexpr std::size_t output_write_bytes = 8 * 1024;
// When a launch has failed or was interrupted and every process is gone, output that its
// destination takes nothing of for this long is dropped, and the launcher exits.
inline constexpr std::chrono::seconds stuck_output_limit{2};

// Writes everything unless the destination fails (EPIPE: nobody will ever read). Blocks: only
// the output threads call it.
ACCEL_DECL bool write_fully(int fd, std::string_view data);

// One destination (the launcher's stdout or stderr) and the thread that writes to it.
class OutputChannel {
 public:
  using Clock = std::chrono::steady_clock;

  // `wake_fd`: a non-blocking pipe the thread writes a byte into when the buffer has room again
  // or is empty, so that the supervisor's poll() wakes up.
  ACCEL_DECL OutputChannel(int destination, int wake_fd);
  OutputChannel(const OutputChannel&) = delete;
  OutputChannel& operator=(const OutputChannel&) = delete;

  // Everything written: the thread ends and is joined. Otherwise the rest is dropped and the
  // thread, perhaps blocked in write() for good, is left to end on its own.
  ACCEL_DECL ~OutputChannel();

  // Queues `text`; never blocks. Dropped when the destination failed or was given up.
  ACCEL_DECL void write(std::string text);

  // Below its bound: the supervisor may read more from the workers. A failed or given-up
  // destination always has room (what comes is dropped, so that no worker waits for it).
  [[nodiscard]] ACCEL_DECL bool has_room() const;

  // Nothing left to write.
  [[nodiscard]] ACCEL_DECL bool idle() const;

  // How long the destination has taken nothing while output waits for it (zero when idle).
  [[nodiscard]] ACCEL_DECL Clock::duration stalled(Clock::time_point now) const;

  // Stops waiting for the destination: what is left is dropped, and so is what comes later.
  // Returns the bytes dropped so far.
  ACCEL_DECL std::size_t give_up();

 private:
  struct State {
    State(int destination_fd, int wake) : destination(destination_fd), wake_fd(wake) {}
    const int destination;
    const int wake_fd;  // never written once abandoned: its owner may have closed it
    std::mutex mutex;
    std::condition_variable work;
    // Pieces as the supervisor queued them; the thread writes from the front one without the
    // lock (a deque's push_back leaves the other elements where they are).
    std::deque<std::string> pieces;
    std::size_t written_of_front = 0;
    std::size_t bytes = 0;  // queued and not yet written
    std::size_t dropped = 0;
    Clock::time_point progress{};  // the last write that went through, or when output arrived
    bool closing = false;          // the owner is done and everything was written: end
    bool abandoned = false;        // the owner stopped waiting: drop everything, end
    bool failed = false;           // the destination refused output (EPIPE): drop everything
  };

  ACCEL_DECL void drop_locked();

  ACCEL_DECL static void wake(const State& state);

  ACCEL_DECL static void write_out(const std::shared_ptr<State> state);

  std::shared_ptr<State> state_;
  std::thread thread_;
};

// The launcher's stdout and stderr, and the pipe through which their threads wake the
// supervisor.
class LauncherOutput {
 public:
  LauncherOutput()
      : wake_(make_wake_pipe()),
        out_(STDOUT_FILENO, wake_.write_end.get()),
        err_(STDERR_FILENO, wake_.write_end.get()) {}

  [[nodiscard]] OutputChannel& out() { return out_; }
  [[nodiscard]] OutputChannel& err() { return err_; }
  [[nodiscard]] OutputChannel& channel(int destination) {
    return destination == STDERR_FILENO ? err_ : out_;
  }
  [[nodiscard]] int wake_fd() const { return wake_.read_end.get(); }

  ACCEL_DECL void clear_wakes() const;

 private:
  ACCEL_DECL static Pipe make_wake_pipe();

  Pipe wake_;  // declared first: destroyed after the channels, whose threads may write to it
  OutputChannel out_;
  OutputChannel err_;
};

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/output.ipp"
#endif
