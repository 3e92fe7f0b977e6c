// The progress record; progress_record.hpp includes it in header-only mode.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "../progress_record.hpp"

namespace accel::runtime {
namespace progress_detail {

// The record of this process, and its file, opened at the first change.
struct ProgressFile {
  std::mutex mutex;
  Progress progress;
  int fd = -2;  // -2: not opened yet, -1: none
  std::size_t longest = 0;

  static ProgressFile& instance() {
    static ProgressFile file;
    return file;
  }

  // `change` edits the record and returns whether it changed anything to write.
  template <class Change>
  void update(Change change) noexcept {
    try {
      const std::lock_guard lock(mutex);
      if (fd == -2) {
        const char* path = std::getenv(progress_file_variable);
        fd = path == nullptr || *path == '\0'
                 ? -1
                 : ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      }
      if (fd < 0 || !change(progress)) return;
      std::string text = "steps " + std::to_string(progress.steps) + "\n";
      if (progress.committed_step >= 0)
        text += "committed " + std::to_string(progress.committed_step) + " " +
                progress.committed + "\n";
      if (progress.resumed_step >= 0)
        text += "resumed " + std::to_string(progress.resumed_step) + " " + progress.resumed + "\n";
      // Never shorter than the record before (a folder's name may be): padded with a line of
      // spaces, which a reader passes over, one pwrite replaces it whole.
      if (text.size() < longest) text.append(longest - text.size(), ' ');
      longest = text.size();
      [[maybe_unused]] const auto written = ::pwrite(fd, text.data(), text.size(), 0);
    } catch (...) {  // no memory for a few dozen bytes: the report is what gives way
    }
  }
};

}  // namespace progress_detail

ACCEL_DECL void record_steps(std::int64_t steps) noexcept {
  // Called for every optimizer of a step: written only when the count moved.
  progress_detail::ProgressFile::instance().update([&](Progress& p) {
    if (p.steps == steps) return false;
    p.steps = steps;
    return true;
  });
}

ACCEL_DECL void record_committed(std::int64_t steps, const std::string& folder) noexcept {
  progress_detail::ProgressFile::instance().update([&](Progress& p) {
    p.committed_step = steps;
    p.committed = folder;
    return true;
  });
}

ACCEL_DECL void record_resumed(std::int64_t steps, const std::string& folder) noexcept {
  progress_detail::ProgressFile::instance().update([&](Progress& p) {
    p.resumed_step = steps;
    p.resumed = folder;
    p.steps = steps;
    return true;
  });
}

ACCEL_DECL std::optional<Progress> read_progress(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  Progress progress;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    std::int64_t steps = -1;
    if (!(fields >> key >> steps) || steps < 0) continue;  // a line this version does not know
    std::string folder;
    fields.get();
    std::getline(fields, folder);
    if (key == "steps") {
      progress.steps = steps;
    } else if (key == "committed") {
      progress.committed_step = steps;
      progress.committed = folder;
    } else if (key == "resumed") {
      progress.resumed_step = steps;
      progress.resumed = folder;
    }
  }
  return progress;
}

}  // namespace accel::runtime
