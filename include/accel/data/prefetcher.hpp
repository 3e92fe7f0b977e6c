// Batches built on worker threads ahead of the loop that consumes them, served in a fixed order.
// The loader hands a Prefetcher "batch index -> batch" work and the sequence of indices an
// iteration will ask for; the workers take indices in that order, at most `capacity` ahead of
// the consumer, and next() returns them in that order whichever worker finishes first. So the
// batches are the ones num_workers = 0 would build, in the same order, and memory holds at most
// `capacity` batches (ready or being built) however slow the training step is.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "../detail/error.hpp"

namespace accel::data {

template <class Batch>
class Prefetcher {
 public:
  // make(index) is called concurrently from `workers` threads; it must be safe to call so.
  using Make = std::function<Batch(std::int64_t)>;

  Prefetcher(Make make, std::vector<std::int64_t> indices, int workers, std::size_t capacity)
      : make_(std::move(make)), indices_(std::move(indices)), slots_(capacity) {
    // Fewer threads than workers when there is less work; a zero capacity would never hand out
    // any work (the loader checks its options; this keeps the class safe on its own).
    if (capacity < 1) accel::detail::fail("Prefetcher: capacity is 0; it must be at least 1");
    const std::size_t threads = std::min(static_cast<std::size_t>(std::max(workers, 0)),
                                         indices_.size());
    try {
      for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
    } catch (...) {  // a thread that could not start: stop the ones that did, then report it
      stop();
      throw;
    }
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  // Stops the workers and joins them: a worker in the middle of a batch finishes that batch
  // first (make() cannot be interrupted), none starts another. Batches not served are dropped.
  ~Prefetcher() { stop(); }

  // The batch of the next index, waiting for it if need be. What make() threw for that index is
  // rethrown here, at the batch it belongs to; the batches after it are still served.
  Batch next() {
    if (served_ >= indices_.size())
      accel::detail::fail("Prefetcher: all {} batches were served; next() asked for one more",
                          indices_.size());
    std::unique_lock lock(mutex_);
    const std::size_t at = served_ % slots_.size();
    Slot& slot = slots_[at];
    ready_.wait(lock, [&] { return slot.ready; });
    slot.ready = false;
    ++served_;
    std::exception_ptr error = std::exchange(slot.error, nullptr);
    std::optional<Batch> batch = std::move(slot.batch);
    slot.batch.reset();
    lock.unlock();
    room_.notify_one();  // a slot came free: one waiting worker may start the next index
    if (error) std::rethrow_exception(error);
    return std::move(*batch);
  }

 private:
  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
    bool ready = false;
  };

  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      room_.wait(lock, [&] {
        return stopping_ || handed_out_ >= indices_.size() ||
               handed_out_ < served_ + slots_.size();
      });
      if (stopping_ || handed_out_ >= indices_.size()) return;
      const std::size_t task = handed_out_++;
      const std::size_t at = task % slots_.size();
      // No one else touches this slot until it is marked ready: the consumer waits for the flag
      // and the previous batch in it was already served (task < served_ + capacity).
      Slot& slot = slots_[at];
      lock.unlock();
      try {
        slot.batch.emplace(make_(indices_[task]));
      } catch (...) {
        slot.error = std::current_exception();
      }
      lock.lock();
      slot.ready = true;
      ready_.notify_one();  // the one consumer; it checks whether this is the slot it waits for
    }
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    room_.notify_all();
    for (auto& thread : threads_)
      if (thread.joinable()) thread.join();
  }

  Make make_;
  std::vector<std::int64_t> indices_;
  std::vector<Slot> slots_;           // a ring: index k goes to slot k % capacity
  std::mutex mutex_;
  std::condition_variable room_;      // workers wait for a free slot (or stop)
  std::condition_variable ready_;     // the consumer waits for its slot to be filled
  std::size_t handed_out_ = 0;        // the next task a worker takes
  std::size_t served_ = 0;            // the next task next() returns
  bool stopping_ = false;
  std::vector<std::thread> threads_;  // last: started once everything above exists
};

}  // namespace accel::data
