// The failure record; failure_record.hpp includes it in header-only mode.
#pragma once

#include "../failure_record.hpp"

namespace accel::runtime {

ACCEL_DECL void note_failure_after_peer(std::string_view error) noexcept {
  const char* path = std::getenv(error_file_variable);
  if (path == nullptr || *path == '\0') return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;  // noted already (the first note stays), or nowhere to write
  std::string text(peer_failure_note);
  text.append("\n").append(error.substr(0, error.find('\n'))).append("\n");
  [[maybe_unused]] const auto written = ::write(fd, text.data(), text.size());
  ::close(fd);
}

ACCEL_DECL bool looks_like_peer_gone(std::string_view error) {
  for (const std::string_view timeout : {"imed out", "imeout"})
    if (error.find(timeout) != std::string_view::npos) return false;
  return true;
}

ACCEL_DECL bool failed_after_peer(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[64] = {};
  const auto count = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  return count > 0 && std::string_view(text, static_cast<std::size_t>(count))
                          .starts_with(peer_failure_note);
}

}  // namespace accel::runtime
