// The ranks' meeting point inside a shared segment: each rank publishes the number of barriers
// it has reached (its epoch) in a cache line of its own and waits until every rank's epoch is
// at least its own. Waiting spins briefly (a peer on another core answers within microseconds)
// and then sleeps on a futex in the segment, so that more ranks than cores, or a rank busy in
// backward, cost no CPU. Every wait is bounded: past the timeout, as soon as a peer's process is
// gone, or as soon as a peer has left (its group torn down without arriving), it fails naming the
// ranks that did not arrive.
#pragma once

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>

#include "../../detail/error.hpp"
#include "../../detail/separate_compilation.hpp"

namespace accel::runtime::shm {

// One rank's control block, a cache line of its own (no false sharing between arrivals).
struct alignas(64) RankControl {
  std::uint64_t epoch;     // barriers reached
  std::int64_t pid;        // for the liveness check
  std::uint64_t call[5];   // what this rank is about to do (transport.hpp's Call)
  std::uint64_t left;      // 1 once this rank has left the group: it arrives nowhere any more
};

// The shared words every rank may sleep on.
struct alignas(64) WakeWords {
  std::uint32_t wake;      // bumped by every arrival
  std::uint32_t sleepers;  // ranks inside futex_wait: arrivals skip the syscall when none
};

ACCEL_DECL bool process_is_gone(std::int64_t pid);

class Barrier {
 public:
  Barrier(WakeWords* words, RankControl* ranks, int rank, int size,
          std::chrono::milliseconds timeout)
      : words_(words), ranks_(ranks), rank_(rank), size_(size), timeout_(timeout) {}

  // Publishes arrival at the next barrier.
  ACCEL_DECL void arrive();

  // This rank leaves: a peer waiting for it at a barrier it has not reached fails at once.
  ACCEL_DECL void leave();

  // Until every rank reached this rank's latest barrier. `what` names it in errors.
  template <class Describe>
  void wait(Describe&& what) {
    if (all_arrived()) return;
    for (int spin = 0; spin < spin_rounds; ++spin) {
      pause();
      if (all_arrived()) return;
    }
    const auto start = std::chrono::steady_clock::now();
    auto next_liveness_check = start + liveness_interval;
    std::atomic_ref sleepers(words_->sleepers);
    std::atomic_ref wake(words_->wake);
    for (;;) {
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t seen = wake.load(std::memory_order_seq_cst);
      if (all_arrived()) {
        sleepers.fetch_sub(1, std::memory_order_seq_cst);
        return;
      }
      timespec slice{0, sleep_slice_ns};
      futex(&words_->wake, FUTEX_WAIT, seen, &slice);
      sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (all_arrived()) return;
      for (int r = 0; r < size_; ++r)
        if (!arrived(r) && std::atomic_ref(ranks_[r].left).load(std::memory_order_seq_cst) != 0)
          detail::fail("{}: rank {} (pid {}) has left the group without joining this collective",
                       what(), r, peer_pid(r));
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_liveness_check) {
        next_liveness_check = now + liveness_interval;
        for (int r = 0; r < size_; ++r)
          if (!arrived(r) && process_is_gone(peer_pid(r)))
            detail::fail("{}: rank {} (pid {}) has exited; the shared-memory transport cannot "
                         "finish without it",
                         what(), r, peer_pid(r));
      }
      if (now - start > timeout_)
        detail::fail("{}: {} did not arrive within the timeout of {} s (Options::timeout, "
                     "ACCEL_TIMEOUT); a rank that stops, exits or skips this collective makes the "
                     "others wait that long",
                     what(), missing(), std::chrono::duration<double>(timeout_).count());
    }
  }

  std::int64_t peer_pid(int r) const {
    return std::atomic_ref(ranks_[r].pid).load(std::memory_order_acquire);
  }

 private:
  static constexpr int spin_rounds = 4000;  // about 10-40 microseconds of pause instructions
  static constexpr long sleep_slice_ns = 20'000'000;
  static constexpr auto liveness_interval = std::chrono::milliseconds(100);

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  static void futex(std::uint32_t* word, int op, std::uint32_t value, const timespec* timeout) {
    ::syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
  }

  bool arrived(int r) const {
    return std::atomic_ref(ranks_[r].epoch).load(std::memory_order_seq_cst) >= epoch_;
  }
  ACCEL_DECL bool all_arrived() const;
  ACCEL_DECL std::string missing() const;

  WakeWords* words_;
  RankControl* ranks_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::uint64_t epoch_ = 0;
};

}  // namespace accel::runtime::shm

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/barrier.ipp"
#endif
