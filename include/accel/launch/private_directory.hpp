// The folder a single-node job meets in (ACCEL_STORE_DIR): the runtime keeps a c10d FileStore
// there instead of listening on a socket. mkdtemp creates it with mode 0700, so only this user
// can join or read the job's rendezvous; it goes away with the launch, whatever is inside, and
// with it the shared-memory segments named after it (runtime/shm/segment_name.hpp) that a rank
// killed while setting them up left in /dev/shm.
#pragma once

#include <ftw.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../runtime/shm/segment_name.hpp"
#include "error.hpp"

namespace accel::launcher {

// rm -rf without following symbolic links (and without <filesystem>, which doubles the time
// accel-launch takes to compile).
inline void remove_tree(const std::string& path) {
  ::nftw(
      path.c_str(),
      [](const char* entry, const struct stat*, int, FTW*) {
        ::remove(entry);  // keep going: remove whatever can be removed
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

// The directory and the run's shared-memory names.
inline void remove_run(const std::string& path) {
  runtime::shm::remove_segments_of_run(runtime::shm::run_token_of(path));
  remove_tree(path);
}

// Folders to remove if the process calls exit() while they exist: with one process the user's
// function runs inside the launcher, and may end the process that way.
struct DirectoriesRemovedAtExit {
  std::mutex mutex;
  std::vector<std::pair<std::string, pid_t>> paths;  // with the pid that created each

  static DirectoriesRemovedAtExit& instance() {
    static DirectoriesRemovedAtExit registry;
    return registry;
  }
  static void remove_all_left() {
    DirectoriesRemovedAtExit& registry = instance();
    const std::scoped_lock lock(registry.mutex);
    for (const auto& [path, owner] : registry.paths) {
      // A forked child calling exit() must not remove its parent's folder.
      if (owner == ::getpid()) remove_run(path);
    }
    registry.paths.clear();
  }
  void add(const std::string& path) {
    static std::once_flag registered;
    std::call_once(registered, [] { std::atexit(&DirectoriesRemovedAtExit::remove_all_left); });
    const std::scoped_lock lock(mutex);
    paths.emplace_back(path, ::getpid());
  }
  void forget(const std::string& path) {
    const std::scoped_lock lock(mutex);
    std::erase_if(paths, [&](const auto& entry) { return entry.first == path; });
  }
};

class PrivateDirectory {
 public:
  // Under $TMPDIR, else /tmp.
  static PrivateDirectory create() {
    const char* tmpdir = std::getenv("TMPDIR");
    const std::string parent = (tmpdir != nullptr && *tmpdir != '\0') ? tmpdir : "/tmp";
    std::string pattern = parent + "/accel-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      fail_with_errno("cannot create the private rendezvous folder in '" + parent +
                      "' (set TMPDIR to a writable folder)");
    DirectoriesRemovedAtExit::instance().add(pattern);
    return PrivateDirectory(std::move(pattern));
  }
  PrivateDirectory(PrivateDirectory&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  PrivateDirectory& operator=(PrivateDirectory&&) = delete;
  PrivateDirectory(const PrivateDirectory&) = delete;
  PrivateDirectory& operator=(const PrivateDirectory&) = delete;
  ~PrivateDirectory() {
    if (path_.empty()) return;
    remove_run(path_);
    DirectoriesRemovedAtExit::instance().forget(path_);
  }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  explicit PrivateDirectory(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace accel::launcher
