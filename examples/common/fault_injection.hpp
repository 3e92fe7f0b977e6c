// A machine failure on demand, for the fault-tolerance test (tests/example/kill-resume.sh):
// ACCEL_EXAMPLE_KILL_AT=<rank>:<step> makes that rank kill itself with SIGKILL as its loop begins
// optimizer step <step> (counted from 1), on the first start only (ACCEL_RESTART_COUNT unset or
// 0), so that a restart under accel-launch --max-restarts runs on. SIGKILL: no handler runs and
// nothing is flushed, as when a node goes down. ACCEL_EXAMPLE_KILL_AT=<rank>:<step>:node first
// kills the rank's parent, its node's launcher, the same way: the node is gone, and nothing
// restarts it (tests/example/lose-node.sh). Unset, nothing happens.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace examples {

inline void die_here_if_asked(int rank, std::int64_t step) {
  static bool whole_node = false;
  static const std::optional<std::pair<int, std::int64_t>> asked =
      []() -> std::optional<std::pair<int, std::int64_t>> {
    const char* at = std::getenv("ACCEL_EXAMPLE_KILL_AT");
    const char* restart = std::getenv("ACCEL_RESTART_COUNT");
    if (at == nullptr || (restart != nullptr && std::string(restart) != "0")) return std::nullopt;
    const std::string text = at;
    const auto colon = text.find(':');
    if (colon == std::string::npos) return std::nullopt;
    whole_node = text.ends_with(":node");
    return std::pair{std::stoi(text.substr(0, colon)), std::stoll(text.substr(colon + 1))};
  }();
  if (!asked || asked->first != rank || asked->second != step) return;
  if (whole_node) ::kill(::getppid(), SIGKILL);
  ::raise(SIGKILL);
}

}  // namespace examples
