// The folder lock and the run's identity; folder_lock.hpp includes it in header-only mode.
#pragma once

#include "../checkpoint_folder.hpp"
#include "../folder_lock.hpp"

namespace accel::state::detail {

ACCEL_DECL std::string lock_holder_description() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  return fmt::format("pid {} on {}, since unix time {}, run {}", ::getpid(), host, seconds,
                     this_run_id());
}

ACCEL_DECL std::string read_holder(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  return n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string("holder unknown");
}

inline std::mutex& run_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace accel::state::detail

namespace accel::state {

ACCEL_DECL void hold_folder_for_this_run(const std::filesystem::path& folder,
                                         std::string_view what) {
  static std::mutex mutex;
  static std::map<std::filesystem::path, int> held;  // descriptors never closed: held till exit
  const std::lock_guard guard(mutex);
  const std::filesystem::path file = folder / folder_lock_name;
  if (const auto found = held.find(folder); found != held.end()) {
    // Still the file this process locked? A folder removed and made again holds a new one.
    struct stat locked {}, now {};
    if (::fstat(found->second, &locked) == 0 && ::stat(file.c_str(), &now) == 0 &&
        locked.st_dev == now.st_dev && locked.st_ino == now.st_ino)
      return;
    ::close(found->second);
    held.erase(found);
  }
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  // O_NONBLOCK: a FIFO put in its place must not stop the run in open().
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0)
    accel::detail::fail("{}: cannot create '{}' ({}); the checkpoint folder must be writable by "
                        "this user: choose another Options::checkpoints.directory",
                        what, file.string(), std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    accel::detail::fail("{}: '{}' is not a regular file; accel keeps its lock there. Move it "
                        "away, or choose another Options::checkpoints.directory",
                        what, file.string());
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int code = errno;
    const std::string holder = detail::read_holder(fd);
    ::close(fd);
    if (code == EWOULDBLOCK)
      accel::detail::fail("{}: the checkpoint folder '{}' belongs to another run that is still "
                          "running ({}); one run uses a checkpoint folder at a time. Give this "
                          "run its own Options::checkpoints.directory, or wait for that run to end",
                          what, folder.string(), holder);
    accel::detail::fail("{}: cannot lock '{}': {}", what, file.string(), std::strerror(code));
  }
  const std::string holder = detail::lock_holder_description();
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    const int code = errno;
    ::close(fd);
    accel::detail::fail("{}: cannot write '{}': {}", what, file.string(), std::strerror(code));
  }
  held.emplace(folder, fd);
}

ACCEL_DECL void claim_checkpoint_folder(const std::filesystem::path& folder) {
  hold_folder_for_this_run(resolved_folder(folder), "Options::checkpoints.directory");
}

ACCEL_DECL const std::string& this_run_id() {
  static const std::string id = [] {
    std::random_device device;
    const std::uint64_t drawn = (std::uint64_t{device()} << 32) ^ device() ^
                                static_cast<std::uint64_t>(::getpid()) ^
                                static_cast<std::uint64_t>(
                                    std::chrono::steady_clock::now().time_since_epoch().count());
    return fmt::format("{:016x}", drawn);
  }();
  return id;
}

namespace detail {
inline std::string& resumed_from_storage() {
  static std::string run;
  return run;
}
}  // namespace detail

ACCEL_DECL std::string resumed_from_run() {
  const std::lock_guard guard(detail::run_mutex());
  return detail::resumed_from_storage();
}

ACCEL_DECL void note_resumed_from_run(const std::string& run) {
  const std::lock_guard guard(detail::run_mutex());
  detail::resumed_from_storage() = run;
}

}  // namespace accel::state
