// One run at a time in a checkpoint folder (docs/concepts/checkpoints.md, "One run per folder").
//
// The main process takes an advisory lock (flock) on <folder>/.accel-lock and keeps it until the
// process ends: for a folder the program named in Options::checkpoints.directory, when the
// Accelerator is made, so that a second run on the same folder stops before it trains, not at
// its first save; for the default ./checkpoints, at the first save to or resume from it (a
// program that never saves must not make it, or contend for it). The kernel drops the lock when
// the process ends, however it ends, so a crashed run leaves nothing to clean up; the file keeps
// the holder's description (pid, host, start, run id) for the next run's error message. Two runs
// sharing a folder would interleave checkpoint numbers, delete each other's staging folders and
// resume from each other's checkpoints.
//
// The lock covers runs that overlap in time. Runs that follow each other are told apart by the
// run id every manifest carries, with the run whose checkpoint the writer had loaded
// (checkpoint_io.hpp: load_state() without a folder refuses a newest checkpoint whose run did
// not continue the run before it in the folder).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <string_view>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"

namespace accel::state {

inline constexpr const char* folder_lock_name = ".accel-lock";

namespace detail {

ACCEL_DECL std::string lock_holder_description();

ACCEL_DECL std::string read_holder(int fd);

}  // namespace detail

// Takes the lock on `folder` (resolved) for the rest of this process, or fails naming the run
// that holds it. Taking it again in the same process is a no-op: several Accelerators of one
// program may share a folder. `what` begins the error ("save_state").
ACCEL_DECL void hold_folder_for_this_run(const std::filesystem::path& folder,
                                         std::string_view what);

// Options::checkpoints.directory, when the program named it, as the Accelerator is made: made if
// absent and locked, on the main process.
ACCEL_DECL void claim_checkpoint_folder(const std::filesystem::path& folder);

// This process's run id: 16 hex digits drawn once, written into every manifest it saves.
ACCEL_DECL const std::string& this_run_id();

// The run id of the checkpoint this process last loaded ("" before any, or when that manifest
// carried none): a save records it, so that a resume can tell a run that continued another from
// one that merely wrote into the same folder.
ACCEL_DECL std::string resumed_from_run();
ACCEL_DECL void note_resumed_from_run(const std::string& run);

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/folder_lock.ipp"
#endif
