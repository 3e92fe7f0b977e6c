// Writing a rank file, and what a background save (save_state(SaveMode::async),
// background_save.hpp) does on its thread: write this rank's file from the snapshot and, on the
// main process, commit the checkpoint once every rank has written its own.
//
// The ranks meet through files, not collectives (checkpoint_io.hpp says why): each rank writes
// rank_<r>.safetensors into the staging folder and then rank_<r>.written beside it (the file's
// size and checksum, or why it could not be written), under a temporary name renamed into place
// so that it is whole when seen. The main process's writer waits until every rank's note is
// there, and so ranks may finish at different times. It removes the notes, and commits as a
// blocking save does (checkpoint_folder.hpp): the manifest, fsynced, the staging folder renamed
// into place, then the pruning to Options::checkpoints.total_limit. A failure on any rank commits
// nothing and removes the staging folder: it is that rank's failure and the main process's,
// reported at their next call, and the newest committed checkpoint stays what it was. A rank
// that dies before its note is written leaves the main process waiting, until the launcher
// stops the group (accel-launch does when a worker fails).
#pragma once

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>

#include "../detail/separate_compilation.hpp"
#include "host_snapshot.hpp"
#include "manifest.hpp"

namespace accel::state {

// Writes `tensors` as staging/rank_<rank>.safetensors, hashing it as it goes, and returns its
// record for the manifest (FileRecord, as JSON).
ACCEL_DECL std::string write_rank_file(const std::filesystem::path& staging, int rank,
                                       const SnapshotTensors& tensors);

// The note a rank leaves in the staging folder once its file is written (or failed).
ACCEL_DECL std::string written_note_name(int rank);

// What the background thread needs, all of it copied on the calling thread.
struct BackgroundWrite {
  std::filesystem::path staging;
  std::filesystem::path target;
  int rank = 0;
  int world_size = 1;
  std::optional<std::filesystem::path> prune_root;  // pruned after the commit, when set
  int total_limit = 0;
  std::optional<Manifest> manifest;  // the main process's, without the files' records

  // This rank's file from `tensors`, its note, and on the main process the commit; `abandon`
  // raised stops the wait for the other ranks' notes (a failure: nothing is committed).
  ACCEL_DECL void run(const SnapshotTensors& tensors, const std::atomic<bool>& abandon) const;

 private:
  ACCEL_DECL void commit_when_every_rank_wrote(const std::atomic<bool>& abandon) const;
};

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/background_write.ipp"
#endif
