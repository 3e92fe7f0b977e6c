// The restart report; restart_report.hpp includes it in header-only mode.
#pragma once

#include <algorithm>
#include <utility>

#include "../restart_report.hpp"

namespace accel::launcher {

inline std::string steps_text(std::int64_t steps) {
  return std::to_string(steps) + (steps == 1 ? " step" : " steps");
}

inline std::string ranks_text(int count, int nodes) {
  return std::to_string(count) + (count == 1 ? " rank (" : " ranks (") + std::to_string(nodes) +
         (nodes == 1 ? " node)" : " nodes)");
}

ACCEL_DECL void RestartReport::add_start(std::string failed_worker,
                                         std::optional<runtime::Progress> progress, int ranks,
                                         int nodes) {
  starts_.push_back({std::move(failed_worker), std::move(progress), ranks, nodes});
}

ACCEL_DECL std::pair<std::int64_t, std::string> RestartReport::newest_checkpoint(
    std::size_t end) const {
  std::pair<std::int64_t, std::string> newest{-1, {}};
  for (std::size_t i = 0; i < end; ++i) {
    const auto& p = starts_[i].progress;
    if (!p) continue;
    // A start commits after it resumes: its own commit is the newer one.
    if (p->committed_step >= 0)
      newest = {p->committed_step, p->committed};
    else if (p->resumed_step >= 0)
      newest = {p->resumed_step, p->resumed};
  }
  return newest;
}

ACCEL_DECL std::string RestartReport::before_restart() const {
  if (starts_.empty() || !starts_.back().progress) return {};
  const auto [step, folder] = newest_checkpoint(starts_.size());
  return "start " + std::to_string(starts_.size()) + " ended at step " +
         std::to_string(starts_.back().progress->steps) +
         (step < 0 ? "; no checkpoint is committed yet"
                   : "; the newest committed checkpoint holds step " + std::to_string(step) +
                         " ('" + folder + "')");
}

ACCEL_DECL std::vector<std::string> RestartReport::summary() const {
  std::vector<std::string> lines;
  bool any_progress = false;
  for (const Start& start : starts_) any_progress = any_progress || start.progress.has_value();
  if (starts_.size() < 2) return lines;
  if (any_progress) progress_lines(lines);
  for (std::size_t i = 1; i < starts_.size(); ++i)
    if (starts_[i].ranks != starts_[i - 1].ranks)
      lines.push_back("start " + std::to_string(i + 1) + " ran on " +
                      ranks_text(starts_[i].ranks, starts_[i].nodes) +
                      ": the world shrank from " +
                      ranks_text(starts_[i - 1].ranks, starts_[i - 1].nodes) + " to " +
                      std::to_string(starts_[i].ranks));
  return lines;
}

ACCEL_DECL void RestartReport::progress_lines(std::vector<std::string>& lines) const {
  std::int64_t redone_in_all = 0;
  bool all_known = true;
  for (std::size_t i = 0; i + 1 < starts_.size(); ++i) {
    const Start& failed = starts_[i];
    const Start& next = starts_[i + 1];
    std::string text = "restart " + std::to_string(i + 1) + ": " + failed.failed_worker;
    if (failed.progress) text += " at step " + std::to_string(failed.progress->steps);
    if (!failed.progress || !next.progress) {
      text += "; steps redone unknown (a start wrote no progress record: it failed before "
              "its first step, or the program does not report it)";
      all_known = false;
    } else {
      const std::int64_t from = std::max<std::int64_t>(next.progress->resumed_step, 0);
      text += next.progress->resumed_step >= 0
                  ? "; start " + std::to_string(i + 2) + " resumed from step " +
                        std::to_string(from) + " ('" + next.progress->resumed + "')"
                  : "; start " + std::to_string(i + 2) + " began afresh (nothing to resume from)";
      const std::int64_t redone = std::max<std::int64_t>(failed.progress->steps - from, 0);
      text += ": " + steps_text(redone) + " redone";
      redone_in_all += redone;
    }
    lines.push_back(std::move(text));
  }
  const std::size_t restarts = starts_.size() - 1;
  lines.push_back(std::to_string(restarts) + (restarts == 1 ? " restart, " : " restarts, ") +
                  (all_known ? steps_text(redone_in_all) + " redone in all"
                             : "at least " + steps_text(redone_in_all) + " redone in all"));
}

}  // namespace accel::launcher
