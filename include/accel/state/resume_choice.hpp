// Which checkpoint load_state() without a folder resumes from: the newest committed one under
// Options::checkpoints.directory, provided the run that wrote it continued the run before it in
// that folder (docs/concepts/checkpoints.md, "One run per folder").
//
// The folder lock keeps two runs that overlap in time apart; this catches runs that follow each
// other: a second program started afresh on a folder that already held another run's
// checkpoints (two terminals, the same --checkpoint-dir, saves that never overlapped) leaves its
// own checkpoints newest, and a resume would silently take them. Each manifest names its run and
// the run whose checkpoint that run had loaded (Manifest::run_id, resumed_from); the newest
// checkpoints of one run are accepted when nothing precedes them in the folder, or when their
// run had resumed from a run whose checkpoint is there. Manifests without run ids (older accel)
// are not judged.
#pragma once

#include <filesystem>
#include <optional>

#include "../detail/separate_compilation.hpp"

namespace accel::state {

// The checkpoint to resume from under `root`, or nothing when it holds no committed one; fails,
// naming both runs and their checkpoints, when the newest was written by a run that did not
// continue the one before it there.
ACCEL_DECL std::optional<std::filesystem::path> checkpoint_to_resume(
    const std::filesystem::path& root);

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/resume_choice.ipp"
#endif
