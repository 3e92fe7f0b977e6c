// A checkpoint folder that cannot be written is found when the Accelerator is made, not at the
// first save after hours of training.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "../detail/error.hpp"

namespace accel::state {

// `folder` is Options::checkpoints.directory; `configured`: the program chose it (not the
// default). An existing folder must be writable. A folder still to be made must have a writable
// nearest existing parent only when the program chose it: a program that never saves may run
// where the default ./checkpoints could not be made, and its first save fails, naming it, then.
inline void check_checkpoint_folder_writable(const std::filesystem::path& folder, bool configured) {
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
