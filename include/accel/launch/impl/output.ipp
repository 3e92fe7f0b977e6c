// The workers' output channels; output.hpp includes it in header-only mode.
#pragma once

#include "../output.hpp"

namespace accel::launcher {

ACCEL_DECL bool write_fully(int fd, std::string_view data) {
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

ACCEL_DECL OutputChannel::OutputChannel(int destination, int wake_fd)
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

ACCEL_DECL OutputChannel::~OutputChannel() {
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

ACCEL_DECL void OutputChannel::write(std::string text) {
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

ACCEL_DECL bool OutputChannel::has_room() const {
  const std::lock_guard lock(state_->mutex);
  return state_->bytes < output_buffer_bytes;
}

ACCEL_DECL bool OutputChannel::idle() const {
  const std::lock_guard lock(state_->mutex);
  return state_->bytes == 0;
}

ACCEL_DECL OutputChannel::Clock::duration OutputChannel::stalled(Clock::time_point now) const {
  const std::lock_guard lock(state_->mutex);
  return state_->bytes == 0 ? Clock::duration::zero() : now - state_->progress;
}

ACCEL_DECL std::size_t OutputChannel::give_up() {
  std::size_t dropped = 0;
  {
    const std::lock_guard lock(state_->mutex);
    drop_locked();
    dropped = state_->dropped;
  }
  state_->work.notify_one();
  return dropped;
}

ACCEL_DECL void OutputChannel::drop_locked() {
  state_->abandoned = true;
  state_->dropped += state_->bytes;
  state_->bytes = 0;
  state_->pieces.clear();  // the thread, if writing, holds its own copy of the slice
  state_->written_of_front = 0;
}

ACCEL_DECL void OutputChannel::wake(const State& state) {
  const char byte = 0;
  [[maybe_unused]] const auto written = ::write(state.wake_fd, &byte, 1);  // full: awake
}

ACCEL_DECL void OutputChannel::write_out(const std::shared_ptr<State> state) {
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

ACCEL_DECL void LauncherOutput::clear_wakes() const {
  char buffer[64];
  while (::read(wake_fd(), buffer, sizeof buffer) > 0) {
  }
}

ACCEL_DECL Pipe LauncherOutput::make_wake_pipe() {
  Pipe pipe = make_pipe();
  set_nonblocking(pipe.read_end);
  set_nonblocking(pipe.write_end);
  return pipe;
}

}  // namespace accel::launcher
