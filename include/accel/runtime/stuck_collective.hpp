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

#include "store_text.hpp"

namespace accel::runtime {

class StuckCollectiveWatch {
 public:
  // The waiting rank publishes after `publish_after` and compares every `compare_every`.
  static constexpr std::chrono::milliseconds publish_after = std::chrono::seconds(1);
  static constexpr std::chrono::milliseconds compare_every = std::chrono::milliseconds(250);

  // `store`: the group's own key space; `rank`, `size`: in the group.
  StuckCollectiveWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
      : store_(std::move(store)), rank_(rank), size_(size), thread_([this] { watch(); }) {}
  ~StuckCollectiveWatch() {
    {
      const std::scoped_lock lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  StuckCollectiveWatch(const StuckCollectiveWatch&) = delete;
  StuckCollectiveWatch& operator=(const StuckCollectiveWatch&) = delete;

  // While one lives, this rank is blocked on collective #`sequence`; `describe` says what it
  // is, as the errors do ("allgather #12 (Long, shape 1) in save_state"). It is called, from
  // the watch's thread, only while this lives and only for a wait that lasts.
  class Waiting {
   public:
    Waiting(StuckCollectiveWatch* watch, std::uint64_t sequence,
            std::function<std::string()> describe)
        : watch_(watch) {
      if (watch_ == nullptr) return;
      const std::scoped_lock lock(watch_->mutex_);
      watch_->waiting_ = Wait{sequence, std::move(describe), std::chrono::steady_clock::now()};
    }
    ~Waiting() {
      if (watch_ == nullptr) return;
      const std::scoped_lock lock(watch_->mutex_);
      watch_->waiting_.reset();
    }
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

  void watch() {
    std::optional<std::uint64_t> published;
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, compare_every, [this] { return stopping_; })) {
      if (!waiting_ || std::chrono::steady_clock::now() - waiting_->since < publish_after) continue;
      const Published mine{waiting_->sequence, waiting_->describe()};  // under the lock: alive
      lock.unlock();
      try {
        if (published != mine.sequence) {
          store_->set(key(rank_), store_bytes(fmt::format("{}\n{}", mine.sequence, mine.what)));
          published = mine.sequence;
        }
        compare(mine);
      } catch (const std::exception&) {
        // The store is gone (rank 0, which serves it, has exited): the collective's own error
        // says so.
      }
      lock.lock();
    }
  }

  // Ends the process when another rank waits on the same collective number for another call.
  void compare(const Published& mine) {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || !store_->check({key(r)})) continue;
      const std::string text = store_text(store_->get(key(r)));
      const auto newline = text.find('\n');
      if (newline == std::string::npos) continue;
      if (std::stoull(text.substr(0, newline)) != mine.sequence) continue;
      const std::string theirs = text.substr(newline + 1);
      if (theirs == mine.what) continue;
      const int low = std::min(r, rank_), high = std::max(r, rank_);
      const std::string& low_what = low == rank_ ? mine.what : theirs;
      const std::string& high_what = low == rank_ ? theirs : mine.what;
      std::fprintf(stderr,
                   "accel: the ranks are in different collectives at #%llu: rank %d waits in %s, "
                   "rank %d waits in %s; every rank must make the same collective calls in the "
                   "same order: save_state, save_model, load_state, load_model, "
                   "gather_for_metrics and wait_for_everyone are collective, so call them on "
                   "every rank, not inside `if (is_main_process())` (this is rank %d)\n",
                   static_cast<unsigned long long>(mine.sequence), low, low_what.c_str(), high,
                   high_what.c_str(), rank_);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }

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
