// check_checkpoint_folder_writable(); writable_folder.hpp includes it in header-only mode.
#pragma once

#include "../writable_folder.hpp"

namespace accel::state {

ACCEL_DECL void check_checkpoint_folder_writable(const std::filesystem::path& folder,
                                                 bool configured) {
  std::error_code error;
  std::filesystem::path existing = std::filesystem::absolute(folder, error);
  if (error) return;
  const bool exists = std::filesystem::exists(existing, error);
  if (!exists && !configured) return;
  while (!std::filesystem::exists(existing, error) && existing.has_relative_path())
    existing = existing.parent_path();
  if (!std::filesystem::is_directory(existing, error))
    accel::detail::fail("Options::checkpoints.directory '{}': '{}' is not a folder; choose a "
                        "folder this user can write",
                        folder.string(), existing.string());
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    accel::detail::fail("Options::checkpoints.directory '{}': this user cannot write {} '{}', so "
                        "save_state() would fail after training; choose a writable folder, or "
                        "make it writable (chmod u+w)",
                        folder.string(), exists ? "the folder" : "its parent", existing.string());
}

}  // namespace accel::state
