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
inline bool write_fully(int fd, std::string_view data) {
  while (!data.empty()) {
    const auto written = ::write(fd, data.data(), data.size());
    if (written > 0) {
      data.remove_prefix(static_cast<std::size_t>(written));
    } else if (written < 0 && errno == EINTR) {
      continue;
    } else if (written < 0 && errno == EAGAIN) {
      // Someone sharing the file description made it non-blocking: wait for room instead.
      pollfd room{fd, POLLOUT, 0};
      ::poll(&room, 1, -1);
    } else {
      return false;
    }
  }
  return true;
}

// One destination (the launcher's stdout or stderr) and the thread that writes to it.
class OutputChannel {
 public:
  using Clock = std::chrono::steady_clock;

  // `wake_fd`: a non-blocking pipe the thread writes a byte into when the buffer has room again
  // or is empty, so that the supervisor's poll() wakes up.
  OutputChannel(int destination, int wake_fd)
      : state_(std::make_shared<State>(destination, wake_fd)) {
    // The thread takes no signal: the launcher's handlers run on the supervising thread (or
    // another thread of the host program), never in the middle of a write.
    sigset_t all;
    sigset_t previous;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &previous);
    try {
      thread_ = std::thread(&OutputChannel::write_out, state_);
    } catch (const std::system_error& error) {
      ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      fail(std::string("cannot start a thread to write the launcher's output: ") + error.what());
    }
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }
  OutputChannel(const OutputChannel&) = delete;
  OutputChannel& operator=(const OutputChannel&) = delete;

  // Everything written: the thread ends and is joined. Otherwise the rest is dropped and the
  // thread, perhaps blocked in write() for good, is left to end on its own.
  ~OutputChannel() {
    bool written = false;
    {
      const std::lock_guard lock(state_->mutex);
      // Given up: the thread may be blocked in write() for good, so it is never waited for.
      written = state_->bytes == 0 && !state_->abandoned;
      if (written)
        state_->closing = true;
      else
        drop_locked();
    }
    state_->work.notify_one();
    if (written)
      thread_.join();
    else
      thread_.detach();
  }

  // Queues `text`; never blocks. Dropped when the destination failed or was given up.
  void write(std::string text) {
    if (text.empty()) return;
    {
      const std::lock_guard lock(state_->mutex);
      if (state_->failed || state_->abandoned) {
        state_->dropped += text.size();
        return;
      }
      if (state_->bytes == 0) state_->progress = Clock::now();  // the stall counts from now
      state_->bytes += text.size();
      state_->pieces.push_back(std::move(text));
    }
    state_->work.notify_one();
  }

  // Below its bound: the supervisor may read more from the workers. A failed or given-up
  // destination always has room (what comes is dropped, so that no worker waits for it).
  [[nodiscard]] bool has_room() const {
    const std::lock_guard lock(state_->mutex);
    return state_->bytes < output_buffer_bytes;
  }

  // Nothing left to write.
  [[nodiscard]] bool idle() const {
    const std::lock_guard lock(state_->mutex);
    return state_->bytes == 0;
  }

  // How long the destination has taken nothing while output waits for it (zero when idle).
  [[nodiscard]] Clock::duration stalled(Clock::time_point now) const {
    const std::lock_guard lock(state_->mutex);
    return state_->bytes == 0 ? Clock::duration::zero() : now - state_->progress;
  }

  // Stops waiting for the destination: what is left is dropped, and so is what comes later.
  // Returns the bytes dropped so far.
  std::size_t give_up() {
    std::size_t dropped = 0;
    {
      const std::lock_guard lock(state_->mutex);
      drop_locked();
      dropped = state_->dropped;
    }
    state_->work.notify_one();
    return dropped;
  }

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

  void drop_locked() {
    state_->abandoned = true;
    state_->dropped += state_->bytes;
    state_->bytes = 0;
    state_->pieces.clear();  // the thread, if writing, holds its own copy of the slice
    state_->written_of_front = 0;
  }

  static void wake(const State& state) {
    const char byte = 0;
    [[maybe_unused]] const auto written = ::write(state.wake_fd, &byte, 1);  // full: awake
  }

  static void write_out(const std::shared_ptr<State> state) {
    std::unique_lock lock(state->mutex);
    for (;;) {
      state->work.wait(lock,
                       [&] { return state->bytes != 0 || state->closing || state->abandoned; });
      if (state->abandoned || state->bytes == 0) return;
      // A copy of at most output_write_bytes: give_up() may clear the deque meanwhile.
      const std::string slice =
          state->pieces.front().substr(state->written_of_front, output_write_bytes);
      lock.unlock();
      const bool written = write_fully(state->destination, slice);
      lock.lock();
      if (state->abandoned) return;
      const bool was_full = state->bytes >= output_buffer_bytes;
      state->progress = Clock::now();
      if (!written) {
        state->failed = true;
        state->dropped += state->bytes;
        state->bytes = 0;
        state->pieces.clear();
        state->written_of_front = 0;
      } else {
        state->bytes -= slice.size();
        state->written_of_front += slice.size();
        if (state->written_of_front == state->pieces.front().size()) {
          state->pieces.pop_front();
          state->written_of_front = 0;
        }
      }
      // Under the lock, so that an owner who gives up (and may then close the pipe) never
      // races with this write.
      if (state->bytes == 0 || (was_full && state->bytes < output_buffer_bytes)) wake(*state);
    }
  }

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

  void clear_wakes() const {
    char buffer[64];
    while (::read(wake_fd(), buffer, sizeof buffer) > 0) {
    }
  }

 private:
  static Pipe make_wake_pipe() {
    Pipe pipe = make_pipe();
    set_nonblocking(pipe.read_end);
    set_nonblocking(pipe.write_end);
    return pipe;
  }

  Pipe wake_;  // declared first: destroyed after the channels, whose threads may write to it
  OutputChannel out_;
  OutputChannel err_;
};

}  // namespace accel::launcher
