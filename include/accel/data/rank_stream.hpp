// One rank's epoch over a streaming dataset (stream.hpp), for StreamingLoader
// (stream_loader.hpp): its workers (threads with num_workers, else the loop's own) each read
// their own shards into batches, served from the workers in turn. Each batch carries where its
// worker stood after it, so the position a checkpoint records is that of the batches served,
// however far the threads read ahead.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "loader.hpp"
#include "stream.hpp"
#include "stream_position.hpp"

namespace accel {
namespace data {

template <class S, class Collate>
class RankStream {
 public:
  using worker_type = WorkerStream<S, Collate>;
  using batch_type = typename worker_type::batch_type;

  // From the start of `epoch`, or from `from` where it has begun.
  RankStream(std::shared_ptr<const S> dataset, const Collate* collate, StreamingOptions options,
             int rank, int world, std::int64_t epoch, const StreamPosition* from)
      : dataset_(std::move(dataset)), collate_(collate), options_(options) {
    position_.world = world;
    position_.rank = rank;
    position_.worker_count = std::max(1, options.num_workers);
    position_.epoch = epoch;
    if (from != nullptr && from->begun()) {
      position_.pass = from->pass;
      position_.turn = from->turn;
      position_.served = from->served;
    }
    start(from != nullptr && from->begun() ? from : nullptr);
  }
  RankStream(const RankStream&) = delete;
  RankStream& operator=(const RankStream&) = delete;
  ~RankStream() { stop(); }

  // The next batch of this reading of the epoch, or nothing once every worker ran out.
  std::optional<batch_type> next() {
    const int count = position_.worker_count;
    while (std::find(position_.finished.begin(), position_.finished.end(), false) !=
           position_.finished.end()) {
      const auto w = static_cast<std::size_t>(position_.turn);
      position_.turn = (position_.turn + 1) % count;
      if (position_.finished[w]) continue;
      Item item = take(w);
      if (item.error) {
        position_.finished[w] = true;  // its thread has ended: the loop must not wait for it
        std::rethrow_exception(item.error);
      }
      position_.workers[w] = std::move(item.position);
      if (!item.batch) {
        position_.finished[w] = true;
        continue;
      }
      ++position_.served;
      return std::move(item.batch);
    }
    return std::nullopt;
  }

  // Reads the rank's shards again from the epoch's start (wrap-around), as pass() + 1.
  void restart() {
    stop();
    ++position_.pass;
    position_.turn = 0;
    start(nullptr);
  }

  std::int64_t pass() const { return position_.pass; }
  // Where the batches served so far leave this rank.
  const StreamPosition& position() const { return position_; }

 private:
  struct Item {
    std::optional<batch_type> batch;  // none: the worker ran out
    WorkerPosition position;          // the worker's, after this batch
    std::exception_ptr error;
  };
  struct Lane {
    std::unique_ptr<worker_type> worker;
    std::deque<Item> ready;
    bool done = false;  // the worker produced its last item
  };

  void start(const StreamPosition* from) {
    const int count = position_.worker_count;
    lanes_.clear();
    lanes_.resize(static_cast<std::size_t>(count));
    position_.finished.assign(static_cast<std::size_t>(count), false);
    position_.workers.assign(static_cast<std::size_t>(count), WorkerPosition{});
    stopping_ = false;
    for (int w = 0; w < count; ++w) {
      auto& lane = lanes_[static_cast<std::size_t>(w)];
      // A generator per (seed, epoch, rank, worker): the same on a wrap-around, which so repeats
      // the epoch's first batches.
      std::uint64_t mix = options_.seed ^ (0xa0761d6478bd642fULL *
                                           static_cast<std::uint64_t>(position_.epoch + 1));
      mix ^= 0xe7037ed1a0b428dbULL *
             static_cast<std::uint64_t>(position_.rank * count + w + 1);
      lane.worker = std::make_unique<worker_type>(
          dataset_, collate_, options_,
          worker_shards(static_cast<std::int64_t>(dataset_->shard_count()), options_,
                        position_.epoch, position_.rank, position_.world, w, count),
          splitmix64(mix));
      if (from != nullptr) {
        lane.worker->restore(from->workers[static_cast<std::size_t>(w)]);
        const auto at = static_cast<std::size_t>(w);
        position_.finished[at] = from->finished[at];
      }
      position_.workers[static_cast<std::size_t>(w)] = lane.worker->position();
    }
    if (options_.num_workers == 0) return;
    try {
      for (auto& lane : lanes_) threads_.emplace_back([this, &lane] { work(lane); });
    } catch (...) {
      stop();
      throw;
    }
  }

  static Item produce(worker_type& worker) {
    Item item;
    try {
      item.batch = worker.next();
      item.position = worker.position();
    } catch (...) {
      item.error = std::current_exception();
    }
    return item;
  }

  Item take(std::size_t w) {
    Lane& lane = lanes_[w];
    if (options_.num_workers == 0) return produce(*lane.worker);
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !lane.ready.empty(); });
    Item item = std::move(lane.ready.front());
    lane.ready.pop_front();
    lock.unlock();
    room_.notify_all();
    return item;
  }

  // A worker thread: batches into its lane, at most prefetch_factor ahead, until its last.
  void work(Lane& lane) {
    const auto ahead = static_cast<std::size_t>(options_.prefetch_factor);
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        room_.wait(lock, [&] { return stopping_ || lane.ready.size() < ahead; });
        if (stopping_) return;
      }
      Item item = produce(*lane.worker);
      const bool last = !item.batch || item.error;
      {
        std::lock_guard lock(mutex_);
        lane.ready.push_back(std::move(item));
      }
      ready_.notify_all();
      if (last) return;
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
    threads_.clear();
  }

  std::shared_ptr<const S> dataset_;
  const Collate* collate_;
  StreamingOptions options_;
  StreamPosition position_;
  std::vector<Lane> lanes_;
  std::mutex mutex_;
  std::condition_variable room_;   // workers wait for room in their lane (or stop)
  std::condition_variable ready_;  // the loop waits for its worker's next item
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace data
}  // namespace accel
