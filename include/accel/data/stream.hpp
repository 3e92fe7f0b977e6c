// A streaming dataset: data read shard by shard (files, typically) from a position, never held
// whole, and what one reader of it does: walk a list of shards, keep a bounded shuffle buffer of
// samples, and say where it stands in a form a checkpoint keeps (the shard it reads, the samples
// read from it, its generator, and where each buffered sample came from, so that the buffer can
// be read again on resume instead of being saved). The loader over it: stream_loader.hpp.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "../detail/dependent_false.hpp"
#include "../detail/error.hpp"
#include "loader.hpp"

namespace accel {

/// A streaming dataset lists its shards: `shard_count()`, the shards being 0 .. count - 1.
template <class S>
concept ListsShards = requires(const S& dataset) {
  { dataset.shard_count() } -> std::convertible_to<std::int64_t>;
};

/// It opens a reader on one shard from a position: `open(shard, position)`, the position being
/// the number of the shard's samples to pass over.
template <class S>
concept OpensShards = requires(const S& dataset, std::int64_t shard, std::int64_t position) {
  dataset.open(shard, position);
};

namespace data::detail {
template <class T>
struct optional_value {};
template <class T>
struct optional_value<std::optional<T>> {
  using type = T;
};
}  // namespace data::detail

/// Its reader's `next()` returns std::optional<Sample>: the shard's next sample, or nothing at
/// the shard's end.
template <class S>
concept ReadsSamples = OpensShards<S> && requires(const S& dataset) {
  typename data::detail::optional_value<std::remove_cvref_t<decltype(
      std::declval<decltype(dataset.open(std::int64_t{}, std::int64_t{}))&>().next())>>::type;
};

/// All three: what a StreamingLoader takes. open() is called from the loader's worker threads
/// at once (each reader is used by one thread only): it is const and must be safe to call so.
template <class S>
concept StreamingDataset = ListsShards<S> && OpensShards<S> && ReadsSamples<S>;

/// What a streaming dataset's reader yields.
template <StreamingDataset S>
using stream_sample_t = typename data::detail::optional_value<std::remove_cvref_t<decltype(
    std::declval<decltype(std::declval<const S&>().open(std::int64_t{}, std::int64_t{}))&>()
        .next())>>::type;

/// Where a StreamingLoader's ranks stop an epoch whose shards hold more batches on some ranks
/// than on others (every rank must take the same number of steps, or a collective waits for
/// ever): at the first rank's end (the other ranks' remaining samples are not served that
/// epoch), or when the last rank ends (the ranks that ended earlier read their shards again from
/// the epoch's start, as Accelerate's even_batches repeats the first samples).
enum class StreamEnd { stop_at_first_end, wrap_around };

/// A StreamingLoader's knobs, for designated initializers.
struct StreamingOptions {
  std::int64_t batch_size = 1;  ///< samples per batch; at least 1
  /// A new shard order each epoch, from (seed, epoch): which rank and worker reads a shard
  /// changes too.
  bool shuffle = false;
  /// Samples each worker holds and draws from at random (from seed): 0 or 1 serves them in the
  /// order read. It mixes samples of one shard with the next ones, not across the whole stream.
  std::int64_t shuffle_buffer = 0;
  std::uint64_t seed = 0;  ///< the shard order's and the shuffle buffers' seed
  /// Drop a worker's last batch when it is short.
  bool drop_last = false;
  /// Threads that read and collate batches ahead of the loop, each from shards of its own; the
  /// batches are served from them in turn. 0 reads on the loop's thread, and serves the batches
  /// 1 worker would. The batches depend on the number of workers, not on thread timing.
  int num_workers = 0;
  int prefetch_factor = 2;  ///< batches each worker reads ahead; at least 1
  StreamEnd even_batches = StreamEnd::wrap_around;  ///< see StreamEnd; prepared loaders only
};

namespace data {

/// Where one worker's reader stands: its shard (an index into its shard list), the samples read
/// from it, its generator, and the place of every sample in its shuffle buffer, in buffer order.
struct WorkerPosition {
  std::int64_t shard_at = 0;
  std::int64_t offset = 0;
  std::uint64_t generator = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> buffered;  // (shard_at, offset) each
};

/// The shards one worker of one rank reads in an epoch: the epoch's shard order (shuffled from
/// (seed, epoch) when asked), shard i of it to rank i % world, and the rank's j-th to worker
/// j % workers. No shard goes to two readers.
inline std::vector<std::int64_t> worker_shards(std::int64_t shards, const StreamingOptions& options,
                                               std::int64_t epoch, int rank, int world,
                                               int worker, int workers) {
  const auto order = epoch_order(shards, options.shuffle, options.seed, epoch);
  std::vector<std::int64_t> mine;
  std::int64_t j = 0;
  for (std::int64_t i = rank; i < shards; i += world, ++j)
    if (j % workers == worker) mine.push_back(order[static_cast<std::size_t>(i)]);
  return mine;
}

/// One worker's stream of batches over its shards: reads samples in order, draws them from its
/// shuffle buffer, collates them. Used by one thread at a time.
template <class S, class Collate>
class WorkerStream {
 public:
  using sample_type = stream_sample_t<S>;
  using reader_type = std::remove_cvref_t<decltype(std::declval<const S&>().open(0, 0))>;
  using batch_type = std::invoke_result_t<const Collate&, std::span<const sample_type>>;

  WorkerStream(std::shared_ptr<const S> dataset, const Collate* collate, StreamingOptions options,
               std::vector<std::int64_t> shards, std::uint64_t generator)
      : dataset_(std::move(dataset)),
        collate_(collate),
        options_(options),
        shards_(std::move(shards)) {
    position_.generator = generator;
  }

  /// Continues from `position`, reading the buffered samples again from their shards.
  void restore(const WorkerPosition& position) {
    position_.shard_at = position.shard_at;
    position_.offset = position.offset;
    position_.generator = position.generator;
    reader_.reset();
    buffer_.clear();
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> spans;  // shard_at: offsets
    for (const auto& [at, offset] : position.buffered) {
      check_place(at, offset);
      auto [it, added] = spans.try_emplace(at, offset, offset);
      if (!added) it->second = {std::min(it->second.first, offset),
                                std::max(it->second.second, offset)};
    }
    // Only the buffered samples are kept; the ones between them are read and passed over.
    const std::set<std::pair<std::int64_t, std::int64_t>> wanted(position.buffered.begin(),
                                                                 position.buffered.end());
    std::map<std::pair<std::int64_t, std::int64_t>, sample_type> read;
    for (const auto& [at, span] : spans) {
      auto reader = dataset_->open(shards_[static_cast<std::size_t>(at)], span.first);
      for (std::int64_t offset = span.first; offset <= span.second; ++offset) {
        auto sample = reader.next();
        if (!sample)
          accel::detail::fail("StreamingLoader: resuming, shard {} ends before sample {}, which "
                              "the checkpoint's shuffle buffer holds; a resume needs the same "
                              "shards, unchanged",
                              shards_[static_cast<std::size_t>(at)], offset);
        if (wanted.count({at, offset}) != 0)
          read.emplace(std::pair{at, offset}, std::move(*sample));
      }
    }
    for (const auto& place : position.buffered) buffer_.push_back({read.at(place), place});
  }

  /// Where the stream stands now.
  WorkerPosition position() const {
    WorkerPosition position = position_;
    position.buffered.clear();
    for (const auto& entry : buffer_) position.buffered.push_back(entry.place);
    return position;
  }

  /// The next batch, or nothing once the shards and the buffer are empty (or only a short batch
  /// is left, under drop_last).
  std::optional<batch_type> next() {
    std::vector<sample_type> samples;
    samples.reserve(static_cast<std::size_t>(options_.batch_size));
    while (static_cast<std::int64_t>(samples.size()) < options_.batch_size) {
      auto sample = draw();
      if (!sample) break;
      samples.push_back(std::move(*sample));
    }
    if (samples.empty()) return std::nullopt;
    if (options_.drop_last && static_cast<std::int64_t>(samples.size()) < options_.batch_size)
      return std::nullopt;
    return (*collate_)(std::span<const sample_type>(samples));
  }

 private:
  struct Entry {
    sample_type sample;
    std::pair<std::int64_t, std::int64_t> place;
  };

  void check_place(std::int64_t at, std::int64_t offset) const {
    if (at < 0 || at >= static_cast<std::int64_t>(shards_.size()) || offset < 0)
      accel::detail::fail("StreamingLoader: a checkpoint's shuffle buffer names sample {} of "
                          "this worker's shard #{}, which it does not have ({} shards); it was "
                          "saved over other shards or options",
                          offset, at, shards_.size());
  }

  // The next sample in reading order, or nothing at the end of the last shard.
  std::optional<Entry> read() {
    while (position_.shard_at < static_cast<std::int64_t>(shards_.size())) {
      if (!reader_)
        reader_.emplace(dataset_->open(shards_[static_cast<std::size_t>(position_.shard_at)],
                                       position_.offset));
      if (auto sample = reader_->next())
        return Entry{std::move(*sample), {position_.shard_at, position_.offset++}};
      reader_.reset();
      ++position_.shard_at;
      position_.offset = 0;
    }
    return std::nullopt;
  }

  // The buffer filled up, then one of its samples drawn at random (the oldest without one).
  std::optional<sample_type> draw() {
    const auto capacity =
        static_cast<std::size_t>(std::max<std::int64_t>(1, options_.shuffle_buffer));
    while (buffer_.size() < capacity) {
      auto entry = read();
      if (!entry) break;
      buffer_.push_back(std::move(*entry));
    }
    if (buffer_.empty()) return std::nullopt;
    std::size_t pick = 0;
    if (capacity > 1)
      pick = static_cast<std::size_t>(splitmix64(position_.generator) % buffer_.size());
    sample_type sample = std::move(buffer_[pick].sample);
    if (pick + 1 != buffer_.size()) buffer_[pick] = std::move(buffer_.back());
    buffer_.pop_back();
    return sample;
  }

  std::shared_ptr<const S> dataset_;
  const Collate* collate_;
  StreamingOptions options_;
  std::vector<std::int64_t> shards_;
  WorkerPosition position_;
  std::optional<reader_type> reader_;  // open on shards_[shard_at] at offset, once needed
  std::vector<Entry> buffer_;
};

}  // namespace data
}  // namespace accel
