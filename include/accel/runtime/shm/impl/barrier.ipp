// Barrier; barrier.hpp includes it in header-only mode.
#pragma once

#include "../barrier.hpp"

namespace accel::runtime::shm {

ACCEL_DECL bool process_is_gone(std::int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  // A dead child its launcher has not reaped yet is a zombie: gone as well.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/stat", static_cast<long long>(pid));
  std::FILE* file = std::fopen(path, "r");
  if (file == nullptr) return false;
  char state = '?';
  const int read = std::fscanf(file, "%*d %*s %c", &state);
  std::fclose(file);
  return read == 1 && (state == 'Z' || state == 'X');
}

ACCEL_DECL void Barrier::arrive() {
  ++epoch_;
  std::atomic_ref(ranks_[rank_].epoch).store(epoch_, std::memory_order_seq_cst);
  std::atomic_ref(words_->wake).fetch_add(1, std::memory_order_seq_cst);
  if (std::atomic_ref(words_->sleepers).load(std::memory_order_seq_cst) > 0)
    futex(&words_->wake, FUTEX_WAKE, INT_MAX, nullptr);
}

ACCEL_DECL void Barrier::leave() {
  std::atomic_ref(ranks_[rank_].left).store(1, std::memory_order_seq_cst);
  std::atomic_ref(words_->wake).fetch_add(1, std::memory_order_seq_cst);
  if (std::atomic_ref(words_->sleepers).load(std::memory_order_seq_cst) > 0)
    futex(&words_->wake, FUTEX_WAKE, INT_MAX, nullptr);
}

ACCEL_DECL bool Barrier::all_arrived() const {
  for (int r = 0; r < size_; ++r)
    if (!arrived(r)) return false;
  return true;
}

ACCEL_DECL std::string Barrier::missing() const {
  std::string names;
  int count = 0;
  for (int r = 0; r < size_; ++r) {
    if (arrived(r)) continue;
    names += fmt::format("{}{}", count++ == 0 ? "" : ", ", r);
  }
  return fmt::format("rank{} {}", count == 1 ? "" : "s", names);
}

}  // namespace accel::runtime::shm
