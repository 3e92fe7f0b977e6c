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
//   owner  accel replaces or deletes only what it wrote and can recognise (docs/checkpoints.md,
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
#include "posix_file.hpp"

namespace accel::state {

inline constexpr const char* manifest_name = "manifest.json";
inline constexpr const char* automatic_prefix = "checkpoint_";

// The folder a path names, as the file system sees it: absolute, symlinks resolved, no ".",
// ".." or trailing separator, so that "ck/", "./ck" and a link to ck are one folder, and "."
// is the working directory itself (whose name a save would otherwise misread).
inline std::filesystem::path resolved_folder(const std::filesystem::path& path) {
  std::filesystem::path resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(path));
  while (!resolved.has_filename() && resolved.has_relative_path()) resolved = resolved.parent_path();
  return resolved;
}

inline std::filesystem::path staging_folder(const std::filesystem::path& target) {
  // Appended, not "." + name: g++ 12 at -O3 warns (-Wrestrict, falsely) on that operator+.
  std::string name = ".";
  name.append(target.filename().string()).append(".partial");
  return target.parent_path() / name;
}

inline bool is_committed(const std::filesystem::path& folder) {
  std::error_code ignored;
  return std::filesystem::is_regular_file(folder / manifest_name, ignored);
}

// Why accel may not replace or delete `folder`, or nothing when it may: it must be a committed
// checkpoint whose manifest accel wrote, and hold only the files that manifest names.
inline std::optional<std::string> why_not_a_checkpoint(const std::filesystem::path& folder) {
  std::error_code error;
  if (!std::filesystem::is_directory(folder, error)) return "it is not a folder";
  if (!is_committed(folder)) return fmt::format("it has no {} (accel did not write it)", manifest_name);
  std::set<std::string> named{manifest_name};
  try {
    const auto manifest = nlohmann::json::parse(posix::read_file(folder / manifest_name));
    if (manifest.value("format", "") != "accel-checkpoint")
      return fmt::format("its {} is not an accel checkpoint's", manifest_name);
    for (const auto& file : manifest.at("files")) named.insert(file.at("name").get<std::string>());
  } catch (const std::exception&) {
    return fmt::format("its {} is not an accel checkpoint's", manifest_name);
  }
  for (const auto& entry : std::filesystem::directory_iterator(folder, error))
    if (!named.contains(entry.path().filename().string()))
      return fmt::format("it holds '{}', which its manifest does not name (accel did not write it)",
                         entry.path().filename().string());
  if (error) return fmt::format("it cannot be listed ({})", error.message());
  return std::nullopt;
}

// A staging folder holds only what a save writes: rank_<r>.safetensors and the manifest.
inline std::optional<std::string> why_not_staging(const std::filesystem::path& folder) {
  std::error_code error;
  if (!std::filesystem::is_directory(folder, error)) return "it is not a folder";
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    const bool rank_file = name.starts_with("rank_") && name.ends_with(".safetensors");
    if (!entry.is_regular_file() || (!rank_file && name != manifest_name))
      return fmt::format("it holds '{}', which a save does not write", name);
  }
  if (error) return fmt::format("it cannot be listed ({})", error.message());
  return std::nullopt;
}

// The n of checkpoint_<n>, or nothing for any other name.
inline std::optional<std::int64_t> automatic_index(const std::string& name) {
  const std::string prefix = automatic_prefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return {};
  std::int64_t n = 0;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  const auto [end, error] = std::from_chars(first, last, n);
  if (error != std::errc() || end != last || n < 0) return {};
  return n;
}

// Committed checkpoint_<n> folders under root, oldest first.
inline std::vector<std::pair<std::int64_t, std::filesystem::path>> committed_checkpoints(
    const std::filesystem::path& root) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code error;
  if (!std::filesystem::is_directory(root, error)) return found;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const auto n = automatic_index(entry.path().filename().string());
    if (n && entry.is_directory() && is_committed(entry.path())) found.emplace_back(*n, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// Where the next automatic save goes: one past the highest n under root, committed or not, so a
// crashed save's number is never reused for different contents.
inline std::filesystem::path next_automatic_checkpoint(const std::filesystem::path& root) {
  std::int64_t next = 0;
  std::error_code error;
  if (std::filesystem::is_directory(root, error))
    for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
      std::string name = entry.path().filename().string();
      // A staging folder of an automatic name counts too: ".checkpoint_7.partial".
      if (name.size() > 9 && name.front() == '.' && name.ends_with(".partial"))
        name = name.substr(1, name.size() - 9);
      if (const auto n = automatic_index(name)) next = std::max(next, *n + 1);
    }
  return root / (automatic_prefix + std::to_string(next));
}

inline std::optional<std::filesystem::path> newest_committed_checkpoint(
    const std::filesystem::path& root) {
  const auto found = committed_checkpoints(root);
  if (found.empty()) return std::nullopt;
  return found.back().second;
}

// Refuses a target that accel may not replace: anything there but a checkpoint it wrote.
// `target` is resolved (resolved_folder).
inline void check_replaceable(const std::filesystem::path& target, std::string_view what) {
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::symlink_status(target, error))) return;
  if (const auto why = why_not_a_checkpoint(target))
    accel::detail::fail("{}: '{}' exists and is not an accel checkpoint: {}; nothing was written "
                        "or deleted. Save to a new folder (e.g. '{}'), or move it away",
                        what, target.string(), *why, (target / "checkpoint").string());
}

// A fresh, empty staging folder for `target` (a leftover of a crashed save is removed, if it
// holds only what a save writes). `target` is resolved.
inline std::filesystem::path begin_staging(const std::filesystem::path& target,
                                           std::string_view what) {
  check_replaceable(target, what);
  const std::filesystem::path staging = staging_folder(target);
  std::filesystem::create_directories(target.parent_path());
  std::error_code error;
  if (std::filesystem::exists(std::filesystem::symlink_status(staging, error))) {
    if (const auto why = why_not_staging(staging))
      accel::detail::fail("{}: the staging folder '{}' exists and {}; accel will not delete it. "
                          "Move it away",
                          what, staging.string(), *why);
    std::filesystem::remove_all(staging);
  }
  std::filesystem::create_directory(staging);
  return staging;
}

// The staging folder, complete with its manifest, becomes `target` (resolved). What it replaces
// is checked again: something may have been put there since begin_staging().
inline void commit_staging(const std::filesystem::path& staging,
                           const std::filesystem::path& target, std::string_view what) {
  posix::sync_folder(staging);
  check_replaceable(target, what);
  std::error_code error;
  if (std::filesystem::exists(target, error)) {
    posix::exchange(staging, target);  // staging now holds the old checkpoint
    std::filesystem::remove_all(staging);
  } else {
    posix::rename(staging, target);
  }
  posix::sync_folder(target.parent_path());
}

// Keeps the newest `limit` committed checkpoints under root (0: keep all); runs after a new one
// is committed, so the limit never leaves fewer committed checkpoints than it names.
// Staging folders of automatic names older than the newest committed checkpoint (crashed saves)
// go too: nothing will ever complete them.
inline void prune_checkpoints(const std::filesystem::path& root, int limit) {
  auto found = committed_checkpoints(root);
  if (found.empty()) return;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 9 || name.front() != '.' || !name.ends_with(".partial")) continue;
    const auto n = automatic_index(name.substr(1, name.size() - 9));
    if (n && *n < found.back().first && !why_not_staging(entry.path()))
      std::filesystem::remove_all(entry.path(), error);
  }
  if (limit <= 0) return;
  const auto excess = static_cast<std::ptrdiff_t>(found.size()) - limit;
  for (std::ptrdiff_t i = 0; i < excess; ++i)
    if (!why_not_a_checkpoint(found[i].second)) std::filesystem::remove_all(found[i].second);
}

}  // namespace accel::state
