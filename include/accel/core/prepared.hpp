// What prepare() hands back: thin handles over the user's own objects that route each call
// through the Accelerator, so the loop reads like plain libtorch. They hold pointers, not
// copies: the Accelerator and the prepared optimizers, schedulers and loaders must outlive them.
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "../data/loader.hpp"
#include "../data/shard.hpp"
#include "../data/stream_loader.hpp"
#include "../detail/error.hpp"
#include "../detail/type_traits.hpp"
#include "../profiling/span.hpp"

namespace accel {

template <class Accel, class Loader>
class PreparedStreamingLoader;  // core/prepared_stream.hpp

// model(x) runs forward under the precision policy's autocast and returns fp32 outputs;
// model->... reaches the module itself.
template <class Accel, class Holder>
class PreparedModel {
 public:
  PreparedModel(Accel* accelerator, Holder module)
      : accelerator_(accelerator), module_(std::move(module)) {}

  template <class... Args>
  auto operator()(Args&&... args) {
    return accelerator_->forward(module_, std::forward<Args>(args)...);
  }
  auto operator->() { return &*module_; }
  auto& operator*() { return *module_; }
  Holder& module() { return module_; }

 private:
  Accel* accelerator_;
  Holder module_;
};

// step() and zero_grad() are no-ops where accumulation is still under way: step() acts on the
// micro-step that ends a window, zero_grad() never drops gradients a window still collects, so
// they may be called on every micro-step in either order.
template <class Accel, class Optimizer>
class PreparedOptimizer {
 public:
  PreparedOptimizer(Accel* accelerator, Optimizer* optimizer)
      : accelerator_(accelerator), optimizer_(optimizer) {}

  void step() { accelerator_->optimizer_step(*optimizer_); }
  void zero_grad() { accelerator_->optimizer_zero_grad(*optimizer_); }
  Optimizer* operator->() const { return optimizer_; }
  Optimizer& operator*() const { return *optimizer_; }

 private:
  Accel* accelerator_;
  Optimizer* optimizer_;
};

// step() advances the schedule only when the optimizer stepped: on the micro-step that ends a
// window, and not after a step the loss scaler skipped (inf/nan gradients under Fp16).
template <class Accel, class Scheduler>
class PreparedScheduler {
 public:
  PreparedScheduler(Accel* accelerator, Scheduler* scheduler)
      : accelerator_(accelerator), scheduler_(scheduler) {}

  void step() {
    if (accelerator_->sync_gradients() && !accelerator_->optimizer_step_was_skipped())
      scheduler_->step();
  }
  Scheduler* operator->() const { return scheduler_; }
  Scheduler& operator*() const { return *scheduler_; }

 private:
  Accel* accelerator_;
  Scheduler* scheduler_;
};

// Iterating yields this rank's batches (data::Shard), already on the Accelerator's device, and
// tells the Accelerator where the epoch stands, so that sync_gradients() and end_of_data() are
// known as each batch arrives. With the loader's num_workers, its workers build this rank's
// global batches ahead (the ones from the resumed position on); slicing, the Accelerator's
// bookkeeping and the copy to the device stay on the loop's thread, as each batch is served.
// Accel is detail::AcceleratorCore (accelerator_core.hpp), whose protocol it calls: one
// PreparedLoader per loader type, whatever the Accelerators' policies.
template <class Accel, class Loader>
class PreparedLoader {
 public:
  using batch_type = typename Loader::batch_type;

  PreparedLoader(Accel* accelerator, Loader* loader, std::size_t slot, data::Shard shard)
      : accelerator_(accelerator), loader_(loader), slot_(slot), shard_(shard) {
    shard_.check(loader_->options().batch_size, loader_->num_samples(),
                 loader_->options().drop_last);
  }

  class iterator {
   public:
    using value_type = batch_type;
    using difference_type = std::ptrdiff_t;

    const batch_type& operator*() const { return *batch_; }
    const batch_type* operator->() const { return &*batch_; }
    iterator& operator++() {
      ++step_;
      if (step_ < count_) owner_->accelerator_->on_step_boundary();
      arrive();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return step_ >= count_; }

   private:
    friend class PreparedLoader;
    explicit iterator(const PreparedLoader* owner)
        : owner_(owner),
          epoch_(owner->loader_->next_epoch()),
          order_(owner->loader_->order(epoch_)),
          global_(owner->loader_->size()),
          count_(owner->size()),
          step_(std::min(owner->accelerator_->on_epoch_begin(owner->slot_, epoch_, owner->size()),
                         owner->size())) {
      const data::Shard& shard = owner_->shard_;
      std::vector<std::int64_t> indices;
      indices.reserve(static_cast<std::size_t>(count_ - step_));
      for (std::int64_t k = step_; k < count_; ++k)
        indices.push_back(shard.global_index(k, global_));
      workers_ = owner_->loader_->prefetch(order_, std::move(indices), shard.pads_last_batch());
      arrive();
    }
    void arrive() {
      if (step_ >= count_) {
        if (count_ > 0) owner_->accelerator_->on_epoch_end();
        return;
      }
      const profiling::Span span(profiling::Phase::data, "data");
      const Loader& loader = *owner_->loader_;
      const data::Shard& shard = owner_->shard_;
      const batch_type global_batch =
          workers_ ? workers_->next()
                   : loader.batch(order_, shard.global_index(step_, global_),
                                  shard.pads_last_batch());
      const bool last = step_ + 1 == count_;
      const std::int64_t real = last ? shard.final_round_real_samples(
                                           global_, loader.num_samples(), loader.options().batch_size)
                                     : -1;
      batch_.emplace(owner_->accelerator_->on_batch(owner_->slot_, shard.slice(global_batch), step_,
                                                    count_, real));
    }

    const PreparedLoader* owner_;
    std::int64_t epoch_;
    std::vector<std::int64_t> order_;
    std::int64_t global_;
    std::int64_t count_;
    std::int64_t step_;
    std::optional<batch_type> batch_;
    // The loader's worker threads, when it has any; copies of the iterator share them.
    std::shared_ptr<data::Prefetcher<batch_type>> workers_;
  };

  // One epoch; the first skip_first_batches(n) batches of it are passed over (for resuming;
  // load_state() sets this from the checkpoint).
  // An epoch without a batch is refused: a loop such as `while (completed_steps() < total)`
  // over it would spin forever without training.
  iterator begin() {
    if (loader_->size() == 0)
      accel::detail::fail("prepared loader #{}: an epoch of it holds no batch ({} samples, batch "
                          "size {}{}), so a loop over it trains nothing and one waiting for "
                          "completed_steps() never ends; give it data, or a batch size of at most "
                          "the number of samples",
                          slot_ + 1, loader_->num_samples(), loader_->options().batch_size,
                          loader_->options().drop_last ? ", drop_last" : "");
    accelerator_->on_step_boundary();
    return iterator(this);
  }
  std::default_sentinel_t end() const { return {}; }

  // This rank's batches per epoch.
  std::int64_t size() const { return shard_.count(loader_->size()); }
  // The next iteration starts at this rank's batch n of its epoch, as if n had been consumed.
  void skip_first_batches(std::int64_t n) { accelerator_->skip_first_batches(slot_, n); }
  Loader& loader() const { return *loader_; }

 private:
  Accel* accelerator_;
  Loader* loader_;
  std::size_t slot_;  // the Accelerator's record of where this loader stands
  data::Shard shard_;
};


namespace detail {

// What prepare() takes, besides optimizers (any torch::optim::Optimizer).
template <class T>
concept ModuleHandle = requires(const T& handle) {
  { handle.ptr() } -> std::convertible_to<std::shared_ptr<torch::nn::Module>>;
} || requires(const T& handle) {
  requires std::same_as<T, std::shared_ptr<typename T::element_type>>;
  requires std::derived_from<typename T::element_type, torch::nn::Module>;
};

template <class T>
concept LrScheduler = std::derived_from<T, torch::optim::LRScheduler>;

template <class T>
inline constexpr bool is_data_loader = is_specialization_of<T, DataLoader>;

template <class T>
inline constexpr bool is_streaming_loader = is_specialization_of<T, StreamingLoader>;

template <class T>
inline constexpr bool is_prepared =
    is_specialization_of<T, PreparedModel> || is_specialization_of<T, PreparedOptimizer> ||
    is_specialization_of<T, PreparedScheduler> || is_specialization_of<T, PreparedLoader> ||
    is_specialization_of<T, PreparedStreamingLoader>;

inline std::shared_ptr<torch::nn::Module> module_pointer(const auto& handle) {
  if constexpr (requires { handle.ptr(); })
    return handle.ptr();
  else
    return handle;
}

}  // namespace detail
}  // namespace accel
