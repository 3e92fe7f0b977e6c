// The main process's progress, for its launcher: how many optimizer steps it completed, the
// newest checkpoint it committed and the one it resumed from. When a worker fails, the launcher
// says from this how much a restart redoes (launch/restart_report.hpp); the workers' exits alone
// do not tell it.
//
// The launcher names the file in ACCEL_PROGRESS_FILE, one per start of the group. The main
// process (rank 0) rewrites it whole at each change, a few lines of text:
//
//   steps 7
//   committed 6 ckpt/checkpoint_3
//   resumed 4 ckpt/checkpoint_2
//
// (a line only once there is something to say). A write is one pwrite of a few dozen bytes, so
// a rank killed at any point leaves the last record or the one before. Text, so that any
// program, a shell script too, can report to the launcher. POSIX only, no torch: the launcher
// reads what the runtime writes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "../detail/separate_compilation.hpp"

namespace accel::runtime {

inline constexpr const char* progress_file_variable = "ACCEL_PROGRESS_FILE";

struct Progress {
  std::int64_t steps = 0;  // optimizer steps completed
  // The newest checkpoint committed in this start, and its completed_steps (-1: none).
  std::int64_t committed_step = -1;
  std::string committed;
  // The checkpoint loaded in this start (load_state, or Options::checkpoints.resume), and its
  // completed_steps (-1: none).
  std::int64_t resumed_step = -1;
  std::string resumed;
};

// In the main process; nothing without a launcher that asked. Safe from any thread (a
// background save commits on its own), and they never throw: the report is a courtesy, the
// training must not fail for it.
ACCEL_DECL void record_steps(std::int64_t steps) noexcept;
ACCEL_DECL void record_committed(std::int64_t steps, const std::string& folder) noexcept;
ACCEL_DECL void record_resumed(std::int64_t steps, const std::string& folder) noexcept;

// In the launcher, once the workers are gone: what the file at `path` says, if it exists.
ACCEL_DECL std::optional<Progress> read_progress(const std::string& path);

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/progress_record.ipp"
#endif
