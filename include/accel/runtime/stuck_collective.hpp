// Finds ranks stuck in different collectives at the same point, on the transports that cannot
// see it themselves (Gloo, NCCL; the shared-memory path compares every call as it meets).
//
// The usual cause is a collective call only some ranks make: save_state() inside
// `if (is_main_process())` puts rank 0 in save_state's gather while rank 1 goes on to the next
// step's gradient all-reduce, and both would wait for the 30-minute timeout. Every rank numbers
// its collectives the same way, so two ranks waiting at the same number on different calls
// cannot both be right.
//
// Cost where nothing is wrong: a mutex and a few stores around each blocking wait (the wait's
// description is made only once it is published). A thread per
// group wakes every quarter second; only a wait that has lasted a second writes to the
// rendezvous store (what this rank waits on) and reads the other ranks' entries, once a second
// while it lasts. A mismatch found there cannot be thrown from the waiting thread (it is inside
// Gloo or NCCL), so the watcher prints one `accel:` line and ends the process, as PyTorch's NCCL
// watchdog does: the peers' connections close and they stop too, each naming the same calls.
//
// Gloo may not leave the second it takes: ranks in different collectives of one kind (save_state's
// all-gather on rank 0, Zero3's all-gather of the next forward's parameters on rank 1) exchange
// messages of different sizes, and Gloo ends the process from its own thread at once. Its
// terminate handler (gloo_abort_handler.hpp) then calls compare_now(), which publishes this
// process's waits at once and compares them with the peers' for a few seconds, so that the same
// line names both calls.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "store_text.hpp"

namespace accel::runtime {

class StuckCollectiveWatch {
 public:
  // The waiting rank publishes after `publish_after` and compares every `compare_every`.
  static constexpr std::chrono::milliseconds publish_after = std::chrono::seconds(1);
  static constexpr std::chrono::milliseconds compare_every = std::chrono::milliseconds(250);

  // `store`: the group's own key space; `rank`, `size`: in the group.
  ACCEL_DECL StuckCollectiveWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int size);
  ACCEL_DECL ~StuckCollectiveWatch();

  // For a process about to end (the terminate handler): every live watch of this process
  // publishes its wait now, whatever its age, and compares it with the peers' until a mismatch
  // ends the process as the watch does (the `accel:` line, exit 1), or `patience` has passed
  // (then it returns). A peer publishes once its own wait has lasted publish_after.
  ACCEL_DECL static void compare_now(std::chrono::milliseconds patience);
  StuckCollectiveWatch(const StuckCollectiveWatch&) = delete;
  StuckCollectiveWatch& operator=(const StuckCollectiveWatch&) = delete;

  // While one lives, this rank is blocked on collective #`sequence`; `describe` says what it
  // is, as the errors do ("allgather #12 (Long, shape 1) in save_state"). It is called, from
  // the watch's thread, only while this lives and only for a wait that lasts.
  class Waiting {
   public:
    ACCEL_DECL Waiting(StuckCollectiveWatch* watch, std::uint64_t sequence,
                       std::function<std::string()> describe);
    ACCEL_DECL ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    StuckCollectiveWatch* watch_;
  };

 private:
  struct Wait {
    std::uint64_t sequence;
    std::function<std::string()> describe;
    std::chrono::steady_clock::time_point since;
  };
  struct Published {
    std::uint64_t sequence;
    std::string what;
  };

  std::string key(int rank) const { return fmt::format("accel/waiting/{}", rank); }

  // This rank's wait, described, if it is waiting and has waited at least `at_least`.
  ACCEL_DECL std::optional<Published> current(std::chrono::milliseconds at_least);

  ACCEL_DECL void watch();

  // Ends the process when another rank waits on the same collective number for another call.
  // From compare_now() (`before`: the peers' entries when it began), also when a peer waits at a
  // later number: Gloo paired its call with this rank's, and it went on. Such an entry counts
  // once it is new since `before`, or at once when `settle` (the last round).
  ACCEL_DECL void compare(const Published& mine, const std::vector<std::string>* before = nullptr,
                          bool settle = false);
  // Each peer's entry as the store holds it now ("" where none), by rank.
  ACCEL_DECL std::vector<std::string> entries();

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::optional<Wait> waiting_;
  std::thread thread_;  // last: it starts once the rest is ready
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/stuck_collective.ipp"
#endif
