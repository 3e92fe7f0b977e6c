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
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "posix_file.hpp"

namespace accel::state {

inline constexpr const char* manifest_name = "manifest.json";
inline constexpr const char* automatic_prefix = "checkpoint_";

inline std::filesystem::path staging_folder(const std::filesystem::path& target) {
  return target.parent_path() / ("." + target.filename().string() + ".partial");
}

inline bool is_committed(const std::filesystem::path& folder) {
  std::error_code ignored;
  return std::filesystem::is_regular_file(folder / manifest_name, ignored);
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

// A fresh, empty staging folder for `target` (a leftover of a crashed save is removed).
inline std::filesystem::path begin_staging(const std::filesystem::path& target) {
  const std::filesystem::path staging = staging_folder(target);
  std::filesystem::create_directories(target.parent_path().empty() ? "." : target.parent_path());
  std::filesystem::remove_all(staging);
  std::filesystem::create_directory(staging);
  return staging;
}

// The staging folder, complete with its manifest, becomes `target`.
inline void commit_staging(const std::filesystem::path& staging,
                           const std::filesystem::path& target) {
  posix::sync_folder(staging);
  std::error_code error;
  if (std::filesystem::exists(target, error)) {
    posix::exchange(staging, target);  // staging now holds the old checkpoint
    std::filesystem::remove_all(staging);
  } else {
    posix::rename(staging, target);
  }
  const std::filesystem::path parent = target.parent_path();
  posix::sync_folder(parent.empty() ? "." : parent);
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
    if (n && *n < found.back().first) std::filesystem::remove_all(entry.path(), error);
  }
  if (limit <= 0) return;
  const auto excess = static_cast<std::ptrdiff_t>(found.size()) - limit;
  for (std::ptrdiff_t i = 0; i < excess; ++i) std::filesystem::remove_all(found[i].second);
}

}  // namespace accel::state
