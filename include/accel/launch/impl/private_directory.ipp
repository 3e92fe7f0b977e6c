// The private directory, removed at exit; private_directory.hpp includes it in header-only mode.
#pragma once

#include "../private_directory.hpp"

namespace accel::launcher {

ACCEL_DECL void remove_tree(const std::string& path) {
  ::nftw(
      path.c_str(),
      [](const char* entry, const struct stat*, int, FTW*) {
        ::remove(entry);  // keep going: remove whatever can be removed
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

ACCEL_DECL void remove_run(const std::string& path) {
  runtime::shm::remove_segments_of_run(runtime::shm::run_token_of(path));
  remove_tree(path);
}

ACCEL_DECL DirectoriesRemovedAtExit& DirectoriesRemovedAtExit::instance() {
  static DirectoriesRemovedAtExit registry;
  return registry;
}

ACCEL_DECL void DirectoriesRemovedAtExit::remove_all_left() {
  DirectoriesRemovedAtExit& registry = instance();
  const std::scoped_lock lock(registry.mutex);
  for (const auto& [path, owner] : registry.paths) {
    // A forked child calling exit() must not remove its parent's folder.
    if (owner == ::getpid()) remove_run(path);
  }
  registry.paths.clear();
}

ACCEL_DECL void DirectoriesRemovedAtExit::add(const std::string& path) {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(&DirectoriesRemovedAtExit::remove_all_left); });
  const std::scoped_lock lock(mutex);
  paths.emplace_back(path, ::getpid());
}

ACCEL_DECL void DirectoriesRemovedAtExit::forget(const std::string& path) {
  const std::scoped_lock lock(mutex);
  std::erase_if(paths, [&](const auto& entry) { return entry.first == path; });
}

ACCEL_DECL PrivateDirectory PrivateDirectory::create() {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string parent = (tmpdir != nullptr && *tmpdir != '\0') ? tmpdir : "/tmp";
  std::string pattern = parent + "/accel-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    fail_with_errno("cannot create the private rendezvous folder in '" + parent +
                    "' (set TMPDIR to a writable folder)");
  DirectoriesRemovedAtExit::instance().add(pattern);
  return PrivateDirectory(std::move(pattern));
}

ACCEL_DECL PrivateDirectory::~PrivateDirectory() {
  if (path_.empty()) return;
  remove_run(path_);
  DirectoriesRemovedAtExit::instance().forget(path_);
}

}  // namespace accel::launcher
