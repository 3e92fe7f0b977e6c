// One run at a time in a checkpoint folder (docs/checkpoints.md, "One run per folder").
//
// The main process of the run that first saves to, or resumes from, Options::checkpoints
// .directory takes an advisory lock (flock) on <folder>/.accel-lock and keeps it until the
// process ends. The kernel drops the lock when the process ends, however it ends, so a crashed
// run leaves nothing to clean up; the file keeps the holder's description (pid, host, start)
// for the next run's error message. Two runs sharing a folder would interleave checkpoint
// numbers, delete each other's staging folders and resume from each other's checkpoints.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
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
// program may share a folder.
ACCEL_DECL void hold_folder_for_this_run(const std::filesystem::path& folder,
                                         std::string_view what);

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/folder_lock.ipp"
#endif
