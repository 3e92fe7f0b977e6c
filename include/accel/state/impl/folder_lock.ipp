// The folder lock; folder_lock.hpp includes it in header-only mode.
#pragma once

#include "../folder_lock.hpp"

namespace accel::state::detail {

ACCEL_DECL std::string lock_holder_description() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  return fmt::format("pid {} on {}, since unix time {}", ::getpid(), host, seconds);
}

ACCEL_DECL std::string read_holder(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  return n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string("holder unknown");
}

}  // namespace accel::state::detail

namespace accel::state {

ACCEL_DECL void hold_folder_for_this_run(const std::filesystem::path& folder,
                                         std::string_view what) {
  static std::mutex mutex;
  static std::map<std::filesystem::path, int> held;  // descriptors never closed: held till exit
  const std::lock_guard guard(mutex);
  if (held.contains(folder)) return;
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  const std::filesystem::path file = folder / folder_lock_name;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    accel::detail::fail("{}: cannot create '{}' ({}); the checkpoint folder must be writable by "
                        "this user: choose another Options::checkpoints.directory",
                        what, file.string(), std::strerror(errno));
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

}  // namespace accel::state
