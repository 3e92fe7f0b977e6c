// A loader over a streaming dataset (stream.hpp): data larger than memory, read shard by shard.
// One rank's epoch is a RankStream (rank_stream.hpp), its workers reading their own shards.
// Across processes, prepare() it (core/prepared_stream.hpp): the ranks then agree where an epoch
// ends.
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

#include "../detail/dependent_false.hpp"
#include "../detail/error.hpp"
#include "loader.hpp"
#include "rank_stream.hpp"
#include "stream.hpp"
#include "stream_position.hpp"

namespace accel {
namespace data {

/// The compile-time check of a streaming dataset, each part with its own message.
template <class S>
constexpr bool check_streaming_dataset() {
  static_assert(ListsShards<S>,
                "accel: a streaming dataset needs `std::int64_t shard_count() const`: how many "
                "shards (files) it has (docs/how-to/streaming-data.md)");
  static_assert(OpensShards<S>,
                "accel: a streaming dataset needs `Reader open(std::int64_t shard, std::int64_t "
                "position) const`: a reader of one shard from its sample `position` "
                "(docs/how-to/streaming-data.md)");
  // Only where open() is there: without it, the message above says what is missing.
  static_assert(!OpensShards<S> || ReadsSamples<S>,
                "accel: a streaming dataset's reader needs `std::optional<Sample> next()`: the "
                "shard's next sample, or std::nullopt at its end (docs/how-to/streaming-data.md)");
  return StreamingDataset<S>;
}

}  // namespace data

/// A StreamingLoader over a type that is not a streaming dataset: the accel: messages of
/// check_streaming_dataset, and nothing else (the loader below is the specialization for
/// streaming datasets, whose body would only add errors that say less).
template <class S, class Collate = data::DefaultCollate>
class StreamingLoader {
 public:
  /// Takes what the loader for streaming datasets takes, so that the messages come from here.
  StreamingLoader(S /*dataset*/, StreamingOptions /*options*/, Collate /*collate*/ = {}) {
    static_cast<void>(data::check_streaming_dataset<S>());
  }
};

/// Iterating a StreamingLoader yourself runs one epoch over every shard on this process (with
/// its workers); prepare() it to split the shards across processes. Each new iteration starts the
/// next epoch, unless a checkpoint's position is pending (load_state), which it continues.
template <class S, class Collate>
  requires StreamingDataset<S>
class StreamingLoader<S, Collate> {
 public:
  using dataset_type = S;                  ///< the streaming dataset
  using sample_type = stream_sample_t<S>;  ///< what its readers' next() yields
  /// What the collate function makes of a batch's samples.
  using batch_type = std::invoke_result_t<const Collate&, std::span<const sample_type>>;
  using stream_type = data::RankStream<S, Collate>;  ///< one rank's epoch (internal)

  /// Takes the dataset, the options and the collate function; refuses options out of range and
  /// a dataset without shards, naming the value.
  StreamingLoader(S dataset, StreamingOptions options, Collate collate = {})
      : dataset_(std::make_shared<const S>(std::move(dataset))),
        options_(options),
        collate_(std::make_unique<const Collate>(std::move(collate))) {
    if (options_.batch_size < 1)
      detail::fail("StreamingOptions::batch_size is {}; it must be at least 1",
                   options_.batch_size);
    if (options_.num_workers < 0)
      detail::fail("StreamingOptions::num_workers is {}; it must be 0 (reading on the loop's "
                   "thread) or more (worker threads)",
                   options_.num_workers);
    if (options_.prefetch_factor < 1)
      detail::fail("StreamingOptions::prefetch_factor is {}; it must be at least 1 (batches each "
                   "worker reads ahead)",
                   options_.prefetch_factor);
    if (options_.shuffle_buffer < 0)
      detail::fail("StreamingOptions::shuffle_buffer is {}; it must be 0 (no shuffling of "
                   "samples) or more (samples each worker draws from)",
                   options_.shuffle_buffer);
    if (shard_count() < 1)
      detail::fail("the streaming dataset's shard_count() is {}; it needs at least one shard",
                   shard_count());
  }

  const S& dataset() const { return *dataset_; }                 ///< the dataset it reads
  const StreamingOptions& options() const { return options_; }  ///< its options
  /// The dataset's shard_count().
  std::int64_t shard_count() const { return static_cast<std::int64_t>(dataset_->shard_count()); }

  /// Set by prepare(): this process's rank among `world`, whose shards it reads.
  void set_process(int rank, int world) {
    rank_ = rank;
    world_ = world;
    position_ = fresh(next_epoch_);
  }

  /// The epoch a fresh iteration starting now runs.
  std::int64_t epoch() const { return next_epoch_; }
  /// The next iteration starts `epoch` from its beginning (its shard order and generators), and
  /// a pending checkpoint position is dropped.
  void set_epoch(std::int64_t epoch) {
    next_epoch_ = epoch;
    pending_.reset();
    position_ = fresh(epoch);
  }

  /// Starts this rank's next epoch, or continues the pending position: the stream, and
  /// records its start as the position a checkpoint saves.
  std::unique_ptr<stream_type> start(int rank, int world) {
    rank_ = rank;
    world_ = world;
    std::optional<data::StreamPosition> from = std::exchange(pending_, std::nullopt);
    const std::int64_t epoch = from ? from->epoch : next_epoch_;
    next_epoch_ = epoch + 1;
    auto stream = std::make_unique<stream_type>(dataset_, collate_.get(), options_, rank, world,
                                                epoch, from ? &*from : nullptr);
    position_ = stream->position();
    if (!from || !from->begun()) position_ = fresh(epoch);
    return stream;
  }
  /// A batch was served: the stream's position is the one to save.
  void served(const data::StreamPosition& position) { position_ = position; }
  /// The epoch's last batch was served: a resume starts the next.
  void finished() { position_ = fresh(next_epoch_); }

  /// This rank's position as a checkpoint records it.
  std::vector<std::int64_t> checkpoint_position() const { return data::encode(position_); }
  /// Checks a checkpoint's position (`where` names its file) and returns the step that makes
  /// it the next iteration's start.
  std::function<void()> stage_position(const std::vector<std::int64_t>& saved,
                                       const std::string& where) {
    data::StreamPosition p = data::decode(saved, where);
    const int workers = std::max(1, options_.num_workers);
    if (p.world != world_)
      detail::fail("load_state: the streaming loader in '{}' was saved by {} processes; this run "
                   "has {}. Each process reads its own shards, so a stream resumes exactly only "
                   "at the world size it was saved at: resume on {} processes",
                   where, p.world, world_, p.world);
    if (p.worker_count != workers)
      detail::fail("load_state: the streaming loader in '{}' was saved with {} workers; this one "
                   "has num_workers = {} ({} readers). The samples each worker reads depend on "
                   "their number: set num_workers = {}",
                   where, p.worker_count, options_.num_workers, workers,
                   p.worker_count == 1 ? 0 : p.worker_count);
    if (p.begun() && static_cast<int>(p.workers.size()) != workers)
      detail::fail("load_state: the streaming loader's position in '{}' lists {} workers for {}; "
                   "the file is damaged",
                   where, p.workers.size(), workers);
    return [this, p = std::move(p)] {
      next_epoch_ = p.epoch;
      position_ = p;
      pending_ = p;
    };
  }

  /// One epoch over every shard, on this process.
  class iterator {
   public:
    using value_type = batch_type;          ///< a batch
    using difference_type = std::ptrdiff_t;  ///< for std::input_iterator
    iterator() = default;
    const batch_type& operator*() const { return *batch_; }     ///< the batch in hand
    const batch_type* operator->() const { return &*batch_; }  ///< the batch in hand
    /// Reads the next batch.
    iterator& operator++() {
      load();
      return *this;
    }
    /// Whether the epoch is over.
    bool operator==(std::default_sentinel_t) const { return !batch_.has_value(); }

   private:
    friend class StreamingLoader;
    explicit iterator(StreamingLoader* loader)
        : loader_(loader), stream_(loader->start(0, 1)) {
      load();
    }
    void load() {
      batch_ = stream_->next();
      if (batch_)
        loader_->served(stream_->position());
      else
        loader_->finished();
    }
    StreamingLoader* loader_ = nullptr;
    std::shared_ptr<stream_type> stream_;
    std::optional<batch_type> batch_;
  };
  /// Starts the next epoch (or continues a checkpoint's pending one): the first batch.
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() const { return {}; }  ///< the end of the epoch

 private:
  data::StreamPosition fresh(std::int64_t epoch) const {
    data::StreamPosition p;
    p.world = world_;
    p.rank = rank_;
    p.worker_count = std::max(1, options_.num_workers);
    p.epoch = epoch;
    return p;
  }

  std::shared_ptr<const S> dataset_;
  StreamingOptions options_;
  std::unique_ptr<const Collate> collate_;  // where the workers find it, if the loader moves
  int rank_ = 0;
  int world_ = 1;
  std::int64_t next_epoch_ = 0;
  std::optional<data::StreamPosition> pending_;  // from load_state, for the next iteration
  data::StreamPosition position_ = fresh(0);
};

}  // namespace accel
