// write_rank_file and BackgroundWrite; background_write.hpp includes it in header-only mode.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "../../detail/error.hpp"
#include "../../runtime/progress_record.hpp"
#include "../background_write.hpp"
#include "../checkpoint_folder.hpp"
#include "../checksum.hpp"
#include "../posix_file.hpp"
#include "../safetensors.hpp"

namespace accel::state {

ACCEL_DECL std::string write_rank_file(const std::filesystem::path& staging, int rank,
                                       const SnapshotTensors& tensors) {
  StreamingChecksum sum;
  const std::uint64_t bytes = safetensors::write_file(
      staging / rank_file_name(rank), tensors, {},
      [&sum](const void* data, std::size_t size) { sum.update(data, size); });
  return nlohmann::json(FileRecord{rank_file_name(rank), bytes, checksum_hex(sum.value())}).dump();
}

ACCEL_DECL std::string written_note_name(int rank) { return fmt::format("rank_{}.written", rank); }

ACCEL_DECL void BackgroundWrite::run(const SnapshotTensors& tensors,
                                     const std::atomic<bool>& abandon) const {
  std::string note, failure;
  try {
    note = write_rank_file(staging, rank, tensors);
  } catch (const std::exception& e) {
    failure = e.what();
    note = nlohmann::json{{"error", failure}}.dump();
  }
  const std::filesystem::path temporary = staging / fmt::format("rank_{}.writing", rank);
  posix::write_file_synced(temporary, note);
  posix::rename(temporary, staging / written_note_name(rank));
  if (rank == 0) return commit_when_every_rank_wrote(abandon);
  if (!failure.empty())
    accel::detail::fail("save_state in the background: {}; '{}' was not committed, and the "
                        "checkpoints before it are as they were",
                        accel::detail::without_accel_prefix(failure), target.string());
}

ACCEL_DECL void BackgroundWrite::commit_when_every_rank_wrote(
    const std::atomic<bool>& abandon) const {
  Manifest complete = *manifest;
  std::string failures;
  for (int r = 0; r < world_size; ++r) {
    const std::filesystem::path note = staging / written_note_name(r);
    std::error_code absent;
    while (!std::filesystem::exists(note, absent)) {
      if (abandon)
        accel::detail::fail("save_state in the background: the program ended with an error "
                            "before rank {} wrote its file; '{}' was not committed",
                            r, target.string());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const nlohmann::json written = nlohmann::json::parse(posix::read_file(note));
    if (written.contains("error"))
      failures += fmt::format("{}rank {}: {}", failures.empty() ? "" : "; ", r,
                              accel::detail::without_accel_prefix(
                                  written.at("error").get<std::string>()));
    else
      complete.files.push_back(written.get<FileRecord>());
  }
  if (!failures.empty()) {
    std::error_code ignored;
    if (!why_not_staging(staging)) std::filesystem::remove_all(staging, ignored);
    accel::detail::fail("save_state in the background: {}; '{}' was not committed, and the "
                        "checkpoints before it are as they were",
                        failures, target.string());
  }
  for (int r = 0; r < world_size; ++r) std::filesystem::remove(staging / written_note_name(r));
  posix::write_file_synced(staging / manifest_name, complete.text());
  commit_staging(staging, target, "save_state");
  runtime::record_committed(complete.completed_steps, target.string());
  if (prune_root) prune_checkpoints(*prune_root, total_limit);
}

}  // namespace accel::state
