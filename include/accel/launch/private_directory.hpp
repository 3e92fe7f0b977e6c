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

#include "../detail/separate_compilation.hpp"
#include "../runtime/shm/segment_name.hpp"
#include "error.hpp"

namespace accel::launcher {

// rm -rf without following symbolic links (and without <filesystem>, which doubles the time
// accel-launch takes to compile).
ACCEL_DECL void remove_tree(const std::string& path);

// The directory and the run's shared-memory names.
ACCEL_DECL void remove_run(const std::string& path);

// Folders to remove if the process calls exit() while they exist: with one process the user's
// function runs inside the launcher, and may end the process that way.
struct DirectoriesRemovedAtExit {
  std::mutex mutex;
  std::vector<std::pair<std::string, pid_t>> paths;  // with the pid that created each

  ACCEL_DECL static DirectoriesRemovedAtExit& instance();
  ACCEL_DECL static void remove_all_left();
  ACCEL_DECL void add(const std::string& path);
  ACCEL_DECL void forget(const std::string& path);
};

class PrivateDirectory {
 public:
  // Under $TMPDIR, else /tmp.
  ACCEL_DECL static PrivateDirectory create();
  PrivateDirectory(PrivateDirectory&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  PrivateDirectory& operator=(PrivateDirectory&&) = delete;
  PrivateDirectory(const PrivateDirectory&) = delete;
  PrivateDirectory& operator=(const PrivateDirectory&) = delete;
  ACCEL_DECL ~PrivateDirectory();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  explicit PrivateDirectory(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace accel::launcher

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/private_directory.ipp"
#endif
