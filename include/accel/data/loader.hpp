// A data loader over a dataset of the user's own sample structs: batches collated with
// Boost.PFR, shuffled reproducibly (the same order on every machine and libtorch version),
// optionally built on worker threads (num_workers) and served in the same order as without.
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <functional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "prefetcher.hpp"
#include "tensor_tree.hpp"

namespace accel {

/// A dataset: a size and random access to samples. get(i) returns any aggregate of tensors.
/// With LoaderOptions::num_workers > 0, get() is called from several threads at once: it is
/// const, and must be safe to call so (reading tensors and files is; a shared cache or a
/// shared random generator needs a lock, and then the samples depend on thread timing).
template <class D>
concept Dataset = requires(const D& dataset, std::int64_t index) {
  { dataset.size() } -> std::convertible_to<std::int64_t>;
  dataset.get(index);
};

/// What a dataset's get() returns.
template <Dataset D>
using sample_t = std::remove_cvref_t<decltype(std::declval<const D&>().get(std::int64_t{}))>;

/// A DataLoader's knobs, for designated initializers: `{.batch_size = 64, .shuffle = true}`.
struct LoaderOptions {
  /// Samples per batch; at least 1.
  std::int64_t batch_size = 1;
  /// A new order each epoch, from (seed, epoch).
  bool shuffle = false;
  bool drop_last = false;  ///< drop a last batch shorter than batch_size
  std::uint64_t seed = 0;  ///< shuffling seed; the order of epoch e depends on (seed, e) only
  /// Threads that build whole batches (get() and collate) ahead of the loop; 0: the loop's own
  /// thread builds each batch when it asks for it. The batches and their order are the same
  /// either way (data/prefetcher.hpp), resumed checkpoints included.
  int num_workers = 0;
  /// Batches each worker may build ahead: at most num_workers * prefetch_factor batches are
  /// held, ready or under way (PyTorch's default, 2). Ignored without workers.
  int prefetch_factor = 2;
  /// Batches in page-locked (pinned) host memory, so that a copy to a CUDA device can be
  /// asynchronous (Options::non_blocking). Needs CUDA: refused where torch has no CUDA device.
  bool pin_memory = false;
};

namespace data {

/// splitmix64: a tiny generator with a fixed definition, so that shuffles are identical across
/// ranks, compilers and libtorch versions (std::shuffle's algorithm is implementation-defined).
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The sample order of one epoch: identity, or a Fisher-Yates shuffle seeded by (seed, epoch).
inline std::vector<std::int64_t> epoch_order(std::int64_t size, bool shuffle, std::uint64_t seed,
                                             std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (shuffle) {
    std::uint64_t state = seed ^ (0xa0761d6478bd642fULL * static_cast<std::uint64_t>(epoch + 1));
    for (std::size_t i = order.size(); i > 1; --i) {
      const auto j = static_cast<std::size_t>(splitmix64(state) % i);
      std::swap(order[i - 1], order[j]);
    }
  }
  return order;
}

/// The default batching: data::collate, which stacks every tensor of the sample aggregate.
struct DefaultCollate {
  /// The samples as one batch of the same type.
  template <class Sample>
  Sample operator()(std::span<const Sample> samples) const {
    return collate(samples);
  }
};

}  // namespace data

/// Iterating a DataLoader runs one epoch; each new iteration starts the next epoch (and its
/// shuffle), like PyTorch's DataLoader with a seeded sampler whose epoch is set every time.
/// A custom Collate is any callable from std::span<const sample_t<D>> to a batch type of yours.
template <Dataset D, class Collate = data::DefaultCollate>
class DataLoader {
 public:
  /// The dataset held.
  using dataset_type = D;
  /// What its get() returns.
  using sample_type = sample_t<D>;
  /// What the collate function makes of a span of samples.
  using batch_type = std::invoke_result_t<const Collate&, std::span<const sample_type>>;

  /// Takes the dataset (shared by copies of the loader); a bad option is an accel::Error
  /// naming it.
  DataLoader(D dataset, LoaderOptions options, Collate collate = {})
      : dataset_(std::make_shared<const D>(std::move(dataset))),
        options_(options),
        collate_(std::move(collate)) {
    if (options_.batch_size < 1)
      detail::fail("LoaderOptions::batch_size is {}; it must be at least 1",
                   options_.batch_size);
    if (options_.num_workers < 0)
      detail::fail("LoaderOptions::num_workers is {}; it must be 0 (batches built on the loop's "
                   "thread) or more (worker threads)",
                   options_.num_workers);
    if (options_.prefetch_factor < 1)
      detail::fail("LoaderOptions::prefetch_factor is {}; it must be at least 1 (batches each "
                   "worker builds ahead; PyTorch's default is 2)",
                   options_.prefetch_factor);
    if (options_.pin_memory && !torch::cuda::is_available())
      detail::fail("LoaderOptions::pin_memory is set, but torch sees no CUDA device "
                   "(torch::cuda::is_available() is false); pinned memory only speeds up copies "
                   "to a CUDA device: set pin_memory = false");
    if (options_.pin_memory && !data::detail::walkable<batch_type>())
      detail::fail("LoaderOptions::pin_memory is set, but the collate function's batch type is "
                   "not made of tensors accel can walk (aggregates, std::vector, std::array, "
                   "std::tuple, std::pair, std::optional); pin the tensors in your collate "
                   "function (tensor.pin_memory()) and set pin_memory = false");
    if (num_samples() < 0)
      detail::fail("the dataset's size() is {}; a dataset holds zero or more samples",
                   num_samples());
  }

  /// The dataset held.
  const D& dataset() const { return *dataset_; }
  /// The options given.
  const LoaderOptions& options() const { return options_; }
  /// The dataset's size().
  std::int64_t num_samples() const { return static_cast<std::int64_t>(dataset_->size()); }

  /// Batches per epoch.
  std::int64_t size() const {
    // Not (n + b - 1) / b, which overflows for a batch size near INT64_MAX.
    const std::int64_t n = num_samples(), b = options_.batch_size;
    return n / b + (!options_.drop_last && n % b != 0 ? 1 : 0);
  }

  /// The epoch the next iteration runs; set it to resume or to replay an epoch.
  std::int64_t epoch() const { return epoch_; }
  /// See epoch().
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  /// The epoch an iteration starting now runs; the one after will run the next.
  std::int64_t next_epoch() { return epoch_++; }

  /// Sample indices of one epoch, in the order they are served.
  std::vector<std::int64_t> order(std::int64_t epoch) const {
    return data::epoch_order(num_samples(), options_.shuffle, options_.seed, epoch);
  }

  /// Batch `index` of an epoch whose order is `order`; with pad_to_full, a short last batch is
  /// completed with the epoch's first samples (cycling, should the epoch be shorter still).
  /// With pin_memory, its CPU tensors are pinned. Safe to call from several threads at once.
  batch_type batch(std::span<const std::int64_t> order, std::int64_t index,
                   bool pad_to_full = false) const {
    const auto n = static_cast<std::int64_t>(order.size());
    const std::int64_t begin = index * options_.batch_size;
    const std::int64_t end =
        pad_to_full ? begin + options_.batch_size : begin + std::min(options_.batch_size, n - begin);
    std::vector<sample_type> samples;
    samples.reserve(static_cast<std::size_t>(end - begin));
    for (std::int64_t i = begin; i < end; ++i) samples.push_back(dataset_->get(order[i % n]));
    if constexpr (data::detail::walkable<batch_type>()) {
      if (options_.pin_memory)
        return data::map_tensors(collate_(std::span<const sample_type>(samples)),
                                 [](const torch::Tensor& t) {
                                   return t.device().is_cpu() && !t.is_pinned() ? t.pin_memory()
                                                                                 : t;
                                 });
    }
    return collate_(std::span<const sample_type>(samples));
  }

  /// With num_workers, worker threads that build the batches `indices` of an epoch whose order
  /// is `order` (as batch() does), in that order; null without workers. The loader must outlive
  /// it: destroying it stops and joins the threads.
  std::unique_ptr<data::Prefetcher<batch_type>> prefetch(std::vector<std::int64_t> order,
                                                         std::vector<std::int64_t> indices,
                                                         bool pad_to_full = false) const {
    if (options_.num_workers == 0) return nullptr;
    const auto capacity = static_cast<std::size_t>(options_.num_workers) *
                          static_cast<std::size_t>(options_.prefetch_factor);
    return std::make_unique<data::Prefetcher<batch_type>>(
        [this, order = std::move(order), pad_to_full](std::int64_t index) {
          return batch(order, index, pad_to_full);
        },
        std::move(indices), options_.num_workers, capacity);
  }

  /// One epoch's batches, an input iterator ended by std::default_sentinel.
  class iterator {
   public:
    /// A batch.
    using value_type = batch_type;
    /// As std::input_iterator asks.
    using difference_type = std::ptrdiff_t;

    iterator() = default;
    /// The batch in hand.
    const batch_type& operator*() const { return *batch_; }
    /// The batch in hand.
    const batch_type* operator->() const { return &*batch_; }
    /// Moves to the next batch (from the workers, with num_workers).
    iterator& operator++() {
      ++index_;
      load();
      return *this;
    }
    /// Whether the epoch is over.
    bool operator==(std::default_sentinel_t) const { return index_ >= count_; }
    /// The batch's index in the epoch.
    std::int64_t index() const { return index_; }
    /// Batches in the epoch.
    std::int64_t count() const { return count_; }

   private:
    friend class DataLoader;
    iterator(const DataLoader* loader, std::int64_t epoch)
        : loader_(loader), order_(loader->order(epoch)), count_(loader->size()) {
      std::vector<std::int64_t> indices(static_cast<std::size_t>(count_));
      std::iota(indices.begin(), indices.end(), std::int64_t{0});
      workers_ = loader_->prefetch(order_, std::move(indices));
      load();
    }
    void load() {
      if (index_ >= count_) return;
      if (workers_)
        batch_.emplace(workers_->next());
      else
        batch_.emplace(loader_->batch(order_, index_));
    }

    const DataLoader* loader_ = nullptr;
    std::vector<std::int64_t> order_;
    std::int64_t index_ = 0;
    std::int64_t count_ = 0;
    std::optional<batch_type> batch_;  // a user's batch type need not be default-constructible
    // Shared, so that the iterator stays copyable as before; copies share one queue (an input
    // iterator is single-pass). The last copy destroyed stops the workers.
    std::shared_ptr<data::Prefetcher<batch_type>> workers_;
  };

  /// Starts the next epoch.
  iterator begin() { return iterator(this, next_epoch()); }
  /// The end of any epoch.
  std::default_sentinel_t end() const { return {}; }

 private:
  std::shared_ptr<const D> dataset_;
  LoaderOptions options_;
  Collate collate_;
  std::int64_t epoch_ = 0;
};

}  // namespace accel
