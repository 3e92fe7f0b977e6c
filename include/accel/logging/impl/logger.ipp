// Logger's members and get_logger; logger.hpp includes this file in header-only mode.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>

#include "../../runtime/environment.hpp"
#include "../logger.hpp"
#include "../run_log.hpp"

namespace accel::logging {

ACCEL_DECL Logger::Logger(std::string name, int rank, LoggerOptions options)
    : name_(std::move(name)),
      rank_(rank),
      level_(options.level ? *options.level : level_from_environment()),
      rank_prefix_(options.rank_prefix) {}

ACCEL_DECL void Logger::log(Level level, std::string_view message, bool main_process_only) const {
  write(level, main_process_only, "{}", fmt::make_format_args(message));
}

ACCEL_DECL void Logger::write(Level level, bool main_process_only, fmt::string_view format,
                              fmt::format_args args) const {
  if (!enabled_for(level) || (main_process_only && rank_ != 0)) return;
  std::string line = rank_prefix_ ? fmt::format("[rank {}] ", rank_) : std::string();
  line += level_name(level);
  if (!name_.empty()) line.append(" ").append(name_);
  line += ": ";
  line += fmt::vformat(format, args);
  write_run_log(line);
  // One write() for the whole line, so that the lines of the ranks sharing a terminal or a pipe
  // do not interleave mid-line. stderr is best effort: a closed stderr stops nothing.
  line += '\n';
  std::string_view left = line;
  while (!left.empty()) {
    const auto written = ::write(STDERR_FILENO, left.data(), left.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) break;
    left.remove_prefix(static_cast<std::size_t>(written));
  }
}

ACCEL_DECL Logger get_logger(std::string name, LoggerOptions options) {
  return Logger(std::move(name), runtime::read_environment().process.rank, options);
}

}  // namespace accel::logging
