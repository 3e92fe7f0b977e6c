// Where checkpoints live and how one becomes visible: never half-written.
//
//   save   every rank writes its files into a staging folder beside the target
//          (".<name>.partial"), each file fsynced; the main process writes manifest.json last,
//          fsyncs the folder, then renames it into place (exchanging it atomically with an
//          older checkpoint of the same name, which is then removed) and fsyncs the parent.
//          A crash at any point leaves the previous checkpoint whole and the target either old
//          or new, never mixed.
//   names  automatic naming puts checkpoint_<n> folders under one root (Options::checkpoints),
//          n counting up; a folder is committed when it holds manifest.json (the last file a
//          save writes). Staging folders and folders without a manifest are passed over.
//   owner  accel replaces or deletes only what it wrote and can recognise (docs/concepts/checkpoints.md,
//          "What accel may delete"): a committed checkpoint (its manifest.json says
//          "accel-checkpoint") holding nothing its manifest does not name, and a staging folder
//          holding only rank files and a manifest. Anything else at a target is refused, named.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "posix_file.hpp"

namespace accel::state {

inline constexpr const char* manifest_name = "manifest.json";
inline constexpr const char* automatic_prefix = "checkpoint_";

// The folder a path names, as the file system sees it: absolute, symlinks resolved, no ".",
// ".." or trailing separator, so that "ck/", "./ck" and a link to ck are one folder, and "."
// is the working directory itself (whose name a save would otherwise misread).
ACCEL_DECL std::filesystem::path resolved_folder(const std::filesystem::path& path);

ACCEL_DECL std::filesystem::path staging_folder(const std::filesystem::path& target);

ACCEL_DECL bool is_committed(const std::filesystem::path& folder);

// Why accel may not replace or delete `folder`, or nothing when it may: it must be a committed
// checkpoint whose manifest accel wrote, and hold only the files that manifest names.
ACCEL_DECL std::optional<std::string> why_not_a_checkpoint(const std::filesystem::path& folder);

// A staging folder holds only what a save writes: rank_<r>.safetensors, the manifest, and a
// background save's notes rank_<r>.written (and .writing, under way).
ACCEL_DECL std::optional<std::string> why_not_staging(const std::filesystem::path& folder);

// The n of checkpoint_<n>, or nothing for any other name.
ACCEL_DECL std::optional<std::int64_t> automatic_index(const std::string& name);

// Committed checkpoint_<n> folders under root, oldest first.
ACCEL_DECL std::vector<std::pair<std::int64_t, std::filesystem::path>> committed_checkpoints(
    const std::filesystem::path& root);

// Where the next automatic save goes: one past the highest n under root, committed or not, so a
// crashed save's number is never reused for different contents.
ACCEL_DECL std::filesystem::path next_automatic_checkpoint(const std::filesystem::path& root);

ACCEL_DECL std::optional<std::filesystem::path> newest_committed_checkpoint(
    const std::filesystem::path& root);

// Refuses a target that accel may not replace: anything there but a checkpoint it wrote.
// `target` is resolved (resolved_folder).
ACCEL_DECL void check_replaceable(const std::filesystem::path& target, std::string_view what);

// A fresh, empty staging folder for `target` (a leftover of a crashed save is removed, if it
// holds only what a save writes). `target` is resolved.
ACCEL_DECL std::filesystem::path begin_staging(const std::filesystem::path& target,
                                               std::string_view what);

// The staging folder, complete with its manifest, becomes `target` (resolved). What it replaces
// is checked again: something may have been put there since begin_staging().
ACCEL_DECL void commit_staging(const std::filesystem::path& staging,
                               const std::filesystem::path& target, std::string_view what);

// Keeps the newest `limit` committed checkpoints under root (0: keep all); runs after a new one
// is committed, so the limit never leaves fewer committed checkpoints than it names.
// Staging folders of automatic names older than the newest committed checkpoint (crashed saves)
// go too: nothing will ever complete them.
ACCEL_DECL void prune_checkpoints(const std::filesystem::path& root, int limit);

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/checkpoint_folder.ipp"
#endif
