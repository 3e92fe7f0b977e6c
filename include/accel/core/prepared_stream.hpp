// What prepare() makes of a StreamingLoader (data/stream_loader.hpp): this rank's batches, read
// from its own shards, on the Accelerator's device. Shards run out at different times on
// different ranks, so before a batch is served the ranks agree that it exists: one all-reduce of
// one integer per batch, min ("every rank still has data": StreamEnd::stop_at_first_end) or max
// ("some rank still has data": StreamEnd::wrap_around, where the ranks that ran out read their
// shards again). Per batch rather than per N batches: the rank that runs out first does so at
// any batch, so agreeing less often would need N batches read ahead on every rank and still
// one round per agreement; one integer costs far less than the step's gradient all-reduce.
//
// The agreement runs ahead of the loop by the accumulation window (at least 2 batches), so that
// when a batch arrives the Accelerator knows whether it is the epoch's last and how long the
// window it opens is, as it knows for a map-style loader.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "../data/stream_loader.hpp"
#include "../detail/error.hpp"
#include "../profiling/span.hpp"

namespace accel {

template <class Accel, class Loader>
class PreparedStreamingLoader {
 public:
  using batch_type = typename Loader::batch_type;

  PreparedStreamingLoader(Accel* accelerator, Loader* loader, std::size_t slot, int rank,
                          int world, bool split_batches)
      : accelerator_(accelerator), loader_(loader), slot_(slot), rank_(rank), world_(world) {
    if (split_batches && world > 1)
      accel::detail::fail("Options::split_batches is set, but a StreamingLoader reads whole "
                          "batches from each process's own shards, and does not split them; set "
                          "split_batches = false (and batch_size to the per-process batch)");
    if (loader_->shard_count() < world)
      accel::detail::fail("StreamingLoader: the dataset has {} shards for {} processes; each "
                          "process reads whole shards, so one would have none: give it at least "
                          "{} shards (split its files), or run fewer processes",
                          loader_->shard_count(), world, world);
    loader_->set_process(rank, world);
  }

  class iterator {
   public:
    using value_type = batch_type;
    using difference_type = std::ptrdiff_t;

    const batch_type& operator*() const { return *batch_; }
    const batch_type* operator->() const { return &*batch_; }
    iterator& operator++() {
      ahead_.pop_front();
      ++index_;
      fill();
      if (!ahead_.empty()) owner_->accelerator_->on_step_boundary();
      arrive();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return ahead_.empty(); }

   private:
    friend class PreparedStreamingLoader;
    explicit iterator(const PreparedStreamingLoader* owner)
        : owner_(owner),
          stream_(owner->loader_->start(owner->rank_, owner->world_)),
          index_(stream_->position().served),
          lookahead_(owner->accelerator_->stream_lookahead()) {
      fill();
      arrive();
    }

    struct Agreed {
      batch_type batch;
      data::StreamPosition after;  // this rank's position once it is served
    };

    // Agrees on batches until `lookahead_` are known or the ranks agreed the epoch is over.
    void fill() {
      while (!over_ && static_cast<int>(ahead_.size()) < lookahead_) {
        const bool wrap = owner_->loader_->options().even_batches == StreamEnd::wrap_around;
        std::optional<batch_type> batch;
        if (stream_->pass() == 0) batch = stream_->next();  // a wrapped rank has no real data
        const std::int64_t agreed = owner_->accelerator_->agree_on_stream(batch ? 1 : 0, wrap);
        if (agreed == 0) {
          over_ = true;
          break;
        }
        if (!batch) batch = stream_->next();
        if (!batch) {
          stream_->restart();
          batch = stream_->next();
        }
        if (!batch)
          accel::detail::fail("StreamingLoader: rank {}'s shards hold no sample in epoch {}, so "
                              "it cannot repeat them while the other ranks finish theirs "
                              "(StreamEnd::wrap_around); give every process shards with samples, "
                              "or use StreamEnd::stop_at_first_end",
                              owner_->rank_, stream_->position().epoch);
        ahead_.push_back({std::move(*batch), stream_->position()});
      }
    }

    void arrive() {
      Loader& loader = *owner_->loader_;
      if (ahead_.empty()) {
        loader.finished();
        if (index_ > 0) owner_->accelerator_->on_epoch_end();
        return;
      }
      const profiling::Span span(profiling::Phase::data, "data");
      const bool last = over_ && ahead_.size() == 1;
      if (last)
        loader.finished();
      else
        loader.served(ahead_.front().after);
      const auto count = index_ + static_cast<std::int64_t>(ahead_.size());
      batch_.emplace(owner_->accelerator_->on_batch(owner_->slot_, ahead_.front().batch, index_,
                                                    count, -1));
    }

    const PreparedStreamingLoader* owner_;
    std::shared_ptr<typename Loader::stream_type> stream_;
    std::int64_t index_;  // batches of the epoch served before the one in hand
    int lookahead_;
    std::deque<Agreed> ahead_;  // the batch in hand first
    bool over_ = false;         // the ranks agreed that no batch follows ahead_
    std::optional<batch_type> batch_;
  };

  /// One epoch of this rank's shards (or the rest of a resumed one). An epoch whose ranks agree
  /// it holds no batch yields none.
  iterator begin() {
    accelerator_->on_step_boundary();
    return iterator(this);
  }
  std::default_sentinel_t end() const { return {}; }
  Loader& loader() const { return *loader_; }

 private:
  Accel* accelerator_;
  Loader* loader_;
  std::size_t slot_;
  int rank_;
  int world_;
};

}  // namespace accel
