// Options::checkpoints' periodic saves and automatic resume (docs/how-to/fault-tolerance.md): what an
// Accelerator keeps for them, and the entry points it calls.
//
//   resume   at the end of each prepare() call, until it is settled: when the checkpoint folder
//            holds a committed checkpoint of this run (state/resume_choice.hpp) and everything
//            the checkpoint holds is prepared (its models, optimizers, schedulers and loaders),
//            it is loaded, exactly as load_state() does; a folder without one settles it too,
//            and the run starts afresh. A training batch served while it is still waiting for
//            objects is an error naming them.
//   periodic where a training loop stands between two batches (a prepared loader about to serve
//            one with autograd on, outside an accumulation window), after every_steps optimizer
//            steps and/or every_seconds: save_state() into the next checkpoint_<n>, in the
//            background when Options::checkpoints.async. That point is the one a resumed run
//            continues from, so the save holds exactly what the loop would have.
//
// The saves and loads need <accel/checkpoints.hpp>. prepare() calls
// after_prepare_checkpoints(accelerator, state::CheckpointCode{}) unqualified: the overload below
// takes state::NoCheckpointCode and refuses those options by name; the one
// state/automatic_checkpoints_io.hpp adds takes state::CheckpointCode, a better match, and is
// found (by argument-dependent lookup, where the call is instantiated) in a translation unit that
// includes <accel/checkpoints.hpp>. A class template specialized there instead would be
// specialized after its instantiation in a unity build that puts a file without the header first.
// Include <accel/checkpoints.hpp> in every file that calls prepare() with these options: two files
// that instantiate the same prepare() differently would break the one-definition rule.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include "../detail/error.hpp"
#include "../options.hpp"
#include "background_save.hpp"

namespace accel::state {

// What an Accelerator keeps for checkpoints from one call to the next.
struct CheckpointRunner {
  BackgroundSave background;
  // completed_steps() at the last periodic save (or the resume), and the last step considered.
  std::int64_t last_saved_step = 0;
  std::int64_t considered_step = 0;
  std::chrono::steady_clock::time_point last_save_time = std::chrono::steady_clock::now();
  bool resume_settled = false;
  std::string resume_waiting;  // what a resume still waits for, in words
  std::optional<std::filesystem::path> resumed_from;
};

// Options::checkpoints' every_steps, every_seconds and resume, checked as the Accelerator is made.
inline void check_automatic_checkpoint_options(const CheckpointOptions& options) {
  if (options.every_steps < 0)
    accel::detail::fail("Options::checkpoints.every_steps is {}; give the optimizer steps between "
                        "checkpoints (at least 1), or 0 for none",
                        options.every_steps);
  if (!(options.every_seconds >= 0) ||
      options.every_seconds == std::numeric_limits<double>::infinity())
    accel::detail::fail("Options::checkpoints.every_seconds is {}; give the seconds between "
                        "checkpoints (more than 0), or 0 for none",
                        options.every_seconds);
}

inline bool automatic_checkpoints_asked(const CheckpointOptions& options) {
  return options.every_steps > 0 || options.every_seconds > 0 || options.resume;
}

// What the two overloads of after_prepare_checkpoints are told apart by.
struct NoCheckpointCode {};
struct CheckpointCode : NoCheckpointCode {};

// Defined in automatic_checkpoints_io.hpp; the Accelerator befriends it.
template <class Accel>
struct AutomaticCheckpoints;

}  // namespace accel::state

namespace accel {

template <class Accel>
void after_prepare_checkpoints(Accel& accelerator, state::NoCheckpointCode) {
  if (state::automatic_checkpoints_asked(accelerator.options().checkpoints))
    accel::detail::fail("Options::checkpoints.every_steps, every_seconds and resume save and load "
                        "checkpoints, which need #include <accel/checkpoints.hpp> (or "
                        "<accel/all.hpp>) in the file that calls prepare(); include it, or leave "
                        "those options at 0 and false");
}

}  // namespace accel
