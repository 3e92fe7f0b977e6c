// What the restarts of a launch cost: which rank failed, at which step, the newest checkpoint
// committed by then, where the next start resumed, and how many optimizer steps it redid. The
// launcher knows the failures; the steps come from the main process's progress record
// (runtime/progress_record.hpp), which accel's Accelerator writes. A program that writes none
// (not an accel program, or one that failed before its first step) gets the restart lines it
// always got and nothing about steps.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "../runtime/progress_record.hpp"

namespace accel::launcher {

class RestartReport {
 public:
  // After each start of the group: the failed rank (Supervisor::failed_worker(), empty after a
  // success), what its progress record said, if it wrote one, and the start's ranks and nodes
  // (fewer than the start before's when a node did not come back: node_rendezvous.hpp).
  ACCEL_DECL void add_start(std::string failed_worker, std::optional<runtime::Progress> progress,
                            int ranks = 0, int nodes = 0);

  // Before a restart: "start 1 ended at step 7; the newest committed checkpoint holds step 6
  // ('ckpt/checkpoint_3')". Empty when the program reported no progress.
  [[nodiscard]] ACCEL_DECL std::string before_restart() const;

  // At the end of a launch that restarted: one line per restart (who failed, at which step,
  // where the next start resumed, the steps redone) and the total, when a progress record was
  // written; then one line per start whose world shrank ("start 2 ran on 1 rank (1 node): the
  // world shrank from 2 ranks (2 nodes) to 1"). Empty without a restart.
  [[nodiscard]] ACCEL_DECL std::vector<std::string> summary() const;

 private:
  struct Start {
    std::string failed_worker;
    std::optional<runtime::Progress> progress;
    int ranks = 0;
    int nodes = 0;
  };
  // The summary's lines about the steps: one per restart, then the total.
  ACCEL_DECL void progress_lines(std::vector<std::string>& lines) const;

  // The newest checkpoint committed in starts [0, end), or resumed from in them: its step and
  // folder; step -1 for none.
  [[nodiscard]] std::pair<std::int64_t, std::string> newest_checkpoint(std::size_t end) const;

  std::vector<Start> starts_;
};

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/restart_report.ipp"
#endif
