// Staging, commit and pruning; checkpoint_folder.hpp includes it in header-only mode.
#pragma once

#include "../checkpoint_folder.hpp"

namespace accel::state {

ACCEL_DECL std::filesystem::path resolved_folder(const std::filesystem::path& path) {
  std::filesystem::path resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(path));
  while (!resolved.has_filename() && resolved.has_relative_path()) resolved = resolved.parent_path();
  return resolved;
}

ACCEL_DECL std::filesystem::path staging_folder(const std::filesystem::path& target) {
  // Appended, not "." + name: g++ 12 at -O3 warns (-Wrestrict, falsely) on that operator+.
  std::string name = ".";
  name.append(target.filename().string()).append(".partial");
  return target.parent_path() / name;
}

ACCEL_DECL bool is_committed(const std::filesystem::path& folder) {
  std::error_code ignored;
  return std::filesystem::is_regular_file(folder / manifest_name, ignored);
}

ACCEL_DECL std::optional<std::string> why_not_a_checkpoint(const std::filesystem::path& folder) {
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

ACCEL_DECL std::optional<std::string> why_not_staging(const std::filesystem::path& folder) {
  std::error_code error;
  if (!std::filesystem::is_directory(folder, error)) return "it is not a folder";
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    // A rank file, or a background save's note that it is written (background_write.hpp).
    const bool rank_file =
        name.starts_with("rank_") && (name.ends_with(".safetensors") || name.ends_with(".written") ||
                                      name.ends_with(".writing"));
    if (!entry.is_regular_file() || (!rank_file && name != manifest_name))
      return fmt::format("it holds '{}', which a save does not write", name);
  }
  if (error) return fmt::format("it cannot be listed ({})", error.message());
  return std::nullopt;
}

ACCEL_DECL std::optional<std::int64_t> automatic_index(const std::string& name) {
  const std::string prefix = automatic_prefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return {};
  std::int64_t n = 0;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  const auto [end, error] = std::from_chars(first, last, n);
  if (error != std::errc() || end != last || n < 0) return {};
  return n;
}

ACCEL_DECL std::vector<std::pair<std::int64_t, std::filesystem::path>> committed_checkpoints(
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

ACCEL_DECL std::filesystem::path next_automatic_checkpoint(const std::filesystem::path& root) {
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

ACCEL_DECL std::optional<std::filesystem::path> newest_committed_checkpoint(
    const std::filesystem::path& root) {
  const auto found = committed_checkpoints(root);
  if (found.empty()) return std::nullopt;
  return found.back().second;
}

ACCEL_DECL void check_replaceable(const std::filesystem::path& target, std::string_view what) {
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::symlink_status(target, error))) return;
  if (const auto why = why_not_a_checkpoint(target))
    accel::detail::fail("{}: '{}' exists and is not an accel checkpoint: {}; nothing was written "
                        "or deleted. Save to a new folder (e.g. '{}'), or move it away",
                        what, target.string(), *why, (target / "checkpoint").string());
}

ACCEL_DECL std::filesystem::path begin_staging(const std::filesystem::path& target,
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

ACCEL_DECL void commit_staging(const std::filesystem::path& staging,
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

ACCEL_DECL void prune_checkpoints(const std::filesystem::path& root, int limit) {
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
