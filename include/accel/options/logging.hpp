// The logger's levels and options (logging/logger.hpp), in a small header of their own: Options
// (options.hpp) holds them without pulling in the logger.
#pragma once

#include <optional>
#include <string_view>

#include "../detail/separate_compilation.hpp"

namespace accel::logging {

/// From least to most severe; a logger writes the lines at or above its level.
enum class Level { debug, info, warning, error };

/// A logger's level and rank prefix (Options::logging).
struct LoggerOptions {
  /// The threshold. Unset: ACCEL_LOG_LEVEL (debug, info, warning or error, in any case), else
  /// info; set, it wins over the variable, as get_logger(name, log_level) does in Accelerate.
  std::optional<Level> level = std::nullopt;
  /// "[rank 1] " before each line, for launchers that do not prefix their workers' output
  /// (torchrun, srun, mpirun; accel-launch has --rank-prefix).
  bool rank_prefix = false;
};

/// "DEBUG", "INFO", "WARNING", "ERROR": how a line names its level.
ACCEL_DECL std::string_view level_name(Level level);

/// A level from its name, in any case ("warning", "WARNING"); anything else is an accel::Error
/// naming the text and the four names.
ACCEL_DECL Level parse_level(std::string_view name);

/// ACCEL_LOG_LEVEL's level, or info when it is unset or empty; a value that names no level is an
/// accel::Error naming it.
ACCEL_DECL Level level_from_environment();

}  // namespace accel::logging

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/logging.ipp"
#endif
