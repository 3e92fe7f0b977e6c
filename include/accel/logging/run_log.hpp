// log.txt in the run folder: while a run is open on the main process (init_trackers() to
// end_training()), every logger of the process also writes its lines there, as a handler added
// to Python's root logger would. One per process, since loggers are made anywhere (get_logger)
// and know nothing of the run. The file is made at its first line, so that a run that logs
// nothing has no log.txt.
#pragma once

#include <filesystem>
#include <string_view>

#include "../detail/separate_compilation.hpp"

namespace accel::logging {

// From now on, lines also go to `file` (made when the first arrives), replacing any other.
ACCEL_DECL void open_run_log(const std::filesystem::path& file);

// Stops writing to `file`; nothing when the lines go elsewhere by now (another run's log).
ACCEL_DECL void close_run_log(const std::filesystem::path& file) noexcept;

// Appends `line` (without its newline) to the run's log, if one is open, in one write(): lines
// of several threads never interleave. A line that cannot be written is an accel::Error naming
// the file.
ACCEL_DECL void write_run_log(std::string_view line);

}  // namespace accel::logging

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/run_log.ipp"
#endif
