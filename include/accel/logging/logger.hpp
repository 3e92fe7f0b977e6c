// A logger that knows which process it runs on, as Accelerate's get_logger(): fmt-style lines
// at four levels, written by the main process only unless a call asks for every process.
//
//   auto log = accel::get_logger("data");            // or accelerator.logger()
//   log.info("{} samples in {} shards", n, shards);  // the main process only
//   log.warning(accel::every_process, "shard {} is empty", rank);
//
// A line is `LEVEL name: message` (no name: `LEVEL: message`), after "[rank R] " when
// LoggerOptions::rank_prefix asks, on stderr in one write(), and also in the run's log.txt while
// a run is open on the main process (run_log.hpp). Lines below the level are dropped before
// their message is formatted.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

#include "../detail/separate_compilation.hpp"
#include "../options/logging.hpp"

namespace accel::logging {

// Passed first to a logging call, that call writes on every process, not the main one only:
//   log.info(accel::every_process, "rank {} loaded {} samples", rank, n);
struct EveryProcess {};
inline constexpr EveryProcess every_process{};

class Logger {
 public:
  // `rank`: this process's (0 is the main process). The level is read here: a bad
  // ACCEL_LOG_LEVEL fails at once, naming its value.
  ACCEL_DECL Logger(std::string name, int rank, LoggerOptions options = {});

  template <class... Args>
  void debug(fmt::format_string<Args...> format, Args&&... args) const {
    write(Level::debug, true, format, fmt::make_format_args(args...));
  }
  template <class... Args>
  void debug(EveryProcess, fmt::format_string<Args...> format, Args&&... args) const {
    write(Level::debug, false, format, fmt::make_format_args(args...));
  }
  template <class... Args>
  void info(fmt::format_string<Args...> format, Args&&... args) const {
    write(Level::info, true, format, fmt::make_format_args(args...));
  }
  template <class... Args>
  void info(EveryProcess, fmt::format_string<Args...> format, Args&&... args) const {
    write(Level::info, false, format, fmt::make_format_args(args...));
  }
  template <class... Args>
  void warning(fmt::format_string<Args...> format, Args&&... args) const {
    write(Level::warning, true, format, fmt::make_format_args(args...));
  }
  template <class... Args>
  void warning(EveryProcess, fmt::format_string<Args...> format, Args&&... args) const {
    write(Level::warning, false, format, fmt::make_format_args(args...));
  }
  template <class... Args>
  void error(fmt::format_string<Args...> format, Args&&... args) const {
    write(Level::error, true, format, fmt::make_format_args(args...));
  }
  template <class... Args>
  void error(EveryProcess, fmt::format_string<Args...> format, Args&&... args) const {
    write(Level::error, false, format, fmt::make_format_args(args...));
  }

  // A message already formatted, at a level chosen at run time.
  ACCEL_DECL void log(Level level, std::string_view message, bool main_process_only = true) const;

  // Whether a call at `level` writes anything on this process (on the main process; elsewhere
  // only calls with every_process do).
  bool enabled_for(Level level) const { return level >= level_; }
  Level level() const { return level_; }
  void set_level(Level level) { level_ = level; }
  const std::string& name() const { return name_; }
  int rank() const { return rank_; }

 private:
  // Not a template: every call site shares it, and the message is formatted only for a line
  // that is written (fmt::vformat, compiled in libfmt).
  ACCEL_DECL void write(Level level, bool main_process_only, fmt::string_view format,
                        fmt::format_args args) const;

  std::string name_;
  int rank_;
  Level level_;
  bool rank_prefix_;
};

// A logger named `name` (its lines say "INFO name: ..."), for this process: its rank is read
// from the launcher's variables (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK; 0 without one).
ACCEL_DECL Logger get_logger(std::string name, LoggerOptions options = {});

}  // namespace accel::logging

namespace accel {
using logging::every_process;
using logging::get_logger;
using logging::Logger;
}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/logger.ipp"
#endif
