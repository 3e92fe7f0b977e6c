// What prepare() hands back: thin handles over the user's own objects that route each call
// through the Accelerator, so the loop reads like plain libtorch. They hold pointers, not
// copies: the Accelerator and the prepared optimizers, schedulers and loaders must outlive them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <iterator>
#include <memory>
#include <utility>

namespace accel {

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

// step() advances the schedule only when the optimizer stepped.
template <class Accel, class Scheduler>
class PreparedScheduler {
 public:
  PreparedScheduler(Accel* accelerator, Scheduler* scheduler)
      : accelerator_(accelerator), scheduler_(scheduler) {}

  void step() {
    if (accelerator_->sync_gradients()) scheduler_->step();
  }
  Scheduler* operator->() const { return scheduler_; }
  Scheduler& operator*() const { return *scheduler_; }

 private:
  Accel* accelerator_;
  Scheduler* scheduler_;
};

// Iterating yields batches already on the Accelerator's device and tells the Accelerator where
// the epoch stands, so that sync_gradients() and end_of_data() are known as each batch arrives.
template <class Accel, class Loader>
class PreparedLoader {
 public:
  using batch_type = typename Loader::batch_type;

  PreparedLoader(Accel* accelerator, Loader* loader) : accelerator_(accelerator), loader_(loader) {}

  class iterator {
   public:
    using value_type = batch_type;
    using difference_type = std::ptrdiff_t;

    const batch_type& operator*() const { return batch_; }
    const batch_type* operator->() const { return &batch_; }
    iterator& operator++() {
      ++inner_;
      arrive();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return inner_ == std::default_sentinel; }

   private:
    friend class PreparedLoader;
    iterator(Accel* accelerator, typename Loader::iterator inner)
        : accelerator_(accelerator), inner_(std::move(inner)) {
      arrive();
    }
    void arrive() {
      if (inner_ == std::default_sentinel) return;
      batch_ = accelerator_->on_batch(*inner_, inner_.index(), inner_.count());
    }

    Accel* accelerator_;
    typename Loader::iterator inner_;
    batch_type batch_{};
  };

  iterator begin() { return iterator(accelerator_, loader_->begin()); }
  std::default_sentinel_t end() const { return {}; }
  std::int64_t size() const { return loader_->size(); }
  Loader& loader() const { return *loader_; }

 private:
  Accel* accelerator_;
  Loader* loader_;
};

}  // namespace accel
