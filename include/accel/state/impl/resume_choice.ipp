// checkpoint_to_resume(); resume_choice.hpp includes it in header-only mode.
#pragma once

#include <fmt/format.h>

#include <set>
#include <string>

#include "../../detail/error.hpp"
#include "../checkpoint_folder.hpp"
#include "../manifest.hpp"
#include "../resume_choice.hpp"

namespace accel::state {

ACCEL_DECL std::optional<std::filesystem::path> checkpoint_to_resume(
    const std::filesystem::path& root) {
  const auto found = committed_checkpoints(root);
  if (found.empty()) return std::nullopt;
  const std::filesystem::path& newest = found.back().second;
  // Only the run fields are read here; a manifest that cannot be read is refused by the load
  // itself, with its own words.
  auto run_of = [](const std::filesystem::path& folder) -> std::optional<Manifest> {
    try {
      return Manifest::read(folder, "load_state");
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  const auto last = run_of(newest);
  if (!last || last->run_id.empty()) return newest;
  // The newest run's checkpoints end the folder; what precedes them is another run's.
  std::size_t first_of_run = found.size() - 1;
  std::optional<Manifest> before;
  while (first_of_run > 0) {
    before = run_of(found[first_of_run - 1].second);
    if (!before || before->run_id != last->run_id) break;
    --first_of_run;
  }
  if (first_of_run == 0 || !before || before->run_id.empty()) return newest;
  std::set<std::string> earlier_runs{before->run_id};
  for (std::size_t i = 0; i + 1 < first_of_run; ++i)
    if (const auto m = run_of(found[i].second)) earlier_runs.insert(m->run_id);
  if (!last->resumed_from.empty() && earlier_runs.contains(last->resumed_from)) return newest;
  accel::detail::fail(
      "load_state: two runs have written into '{}': its newest checkpoint '{}' is run {}'s, "
      "which {}, while '{}' before it is run {}'s; resuming would continue a run that is not the "
      "one that wrote the earlier checkpoints. Pass the checkpoint to resume from to "
      "load_state(folder), or give each run its own Options::checkpoints.directory",
      root.string(), newest.filename().string(), last->run_id,
      last->resumed_from.empty()
          ? std::string("started afresh")
          : fmt::format("had resumed from run {}, none of whose checkpoints is here",
                        last->resumed_from),
      found[first_of_run - 1].second.filename().string(), before->run_id);
}

}  // namespace accel::state
