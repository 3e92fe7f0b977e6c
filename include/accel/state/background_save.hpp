// save_state(SaveMode::async) (docs/how-to/fault-tolerance.md): the thread that writes and commits a
// checkpoint while the training loop goes on, and the snapshot it writes from.
//
// One write at a time: the next save, load_state(), end_training() and the Accelerator's end wait
// for the one under way (wait()), and a failure is handed to the first of them, once, as its
// `accel:` error; at the Accelerator's end, where nothing can throw, it is printed and the
// process exits with status 1, so that a checkpoint that was never committed is never taken for
// one that was. The thread issues no collective (checkpoint_io.hpp says what it does instead).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "../detail/separate_compilation.hpp"
#include "host_snapshot.hpp"

namespace accel {

/// How save_state() writes: sync returns once the checkpoint is committed; async returns once
/// this rank's state is copied into host memory, and a background thread writes and commits it
/// (docs/how-to/fault-tolerance.md).
enum class SaveMode {
  sync,   ///< return once the checkpoint is committed
  async,  ///< return once the snapshot is taken; write and commit in the background
};

namespace state {

class BackgroundSave {
 public:
  BackgroundSave() = default;
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;
  // Waits for the write under way; a failure not yet reported is printed, and the process exits
  // with status 1. While an exception is on its way out (a peer may be gone), the write is told
  // to stop waiting for the other ranks first, and nothing more is done.
  ACCEL_DECL ~BackgroundSave();

  // Waits for the write under way, if any, and returns its failure ("" for none) once: a
  // failure already returned is not returned again.
  ACCEL_DECL std::string wait();
  // Runs `write` on a thread of its own; the write under way must have been waited for. The flag
  // it is given is raised when it should stop waiting for other ranks.
  using Write = std::function<void(const std::atomic<bool>& abandon)>;
  ACCEL_DECL void start(Write write);

  HostSnapshot& snapshot() { return snapshot_; }
  std::int64_t snapshot_bytes() const { return snapshot_.bytes(); }

 private:
  HostSnapshot snapshot_;
  std::thread thread_;
  std::string failure_;  // written by the thread, read after joining it
  std::atomic<bool> abandon_{false};
};

}  // namespace state
}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/background_save.ipp"
#endif
