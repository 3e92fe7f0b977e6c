// Where a micro-step stands inside its accumulation window. The window is GradAccum's N
// micro-batches, except the last window of an epoch, which is as long as the batches left:
// its loss is scaled by 1/(its real length), so that the update it makes has the same size as a
// full one (Accelerate divides by N there, which under-scales that update).
//
// A micro-step is a batch, not a backward(): it begins when a prepared loader yields a batch
// (or at Accelerator::accumulate() in a loop without one) and lasts until the next one begins,
// so several backward() calls on one batch (a GAN's two losses, several models) share it. In a
// loop with neither, each backward() is a micro-step of its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

namespace accel::detail {

class GradientState {
 public:
  explicit GradientState(int accumulation_steps) : steps_(accumulation_steps) {}

  // A micro-step begins: when a prepared loader yields a batch (it knows how many batches the
  // epoch still holds, this one included), or at accumulate().
  void begin_micro_step(std::optional<std::int64_t> batches_left = std::nullopt,
                        bool first_of_epoch = false) {
    if (first_of_epoch || position_ == window_) {
      window_ = steps_;
      if (batches_left) window_ = static_cast<int>(std::min<std::int64_t>(steps_, *batches_left));
      position_ = 0;
    }
    ++position_;
    ++micro_steps_;
    open_ = true;
  }
  // The loader's epoch ended, or the accumulate() scope closed: the next backward() outside a
  // batch begins a micro-step of its own.
  void end_micro_step() { open_ = false; }

  bool in_micro_step() const { return open_; }

  // Every backward() calls this first.
  void on_backward() {
    if (!open_) {
      begin_micro_step();
      open_ = false;
    }
    collecting_ = !sync_gradients();
  }

  // True while .grad holds gradients of a window not yet complete: zero_grad() must keep them.
  bool collecting() const { return collecting_; }

  // True on the micro-step that ends its window: gradients are synchronised and the optimizer
  // steps. Known as soon as the loader yields the batch.
  bool sync_gradients() const { return position_ == window_; }
  // Each micro-step's loss is multiplied by this (1 / the window's length), so that a window's
  // summed gradients are the mean over its batches.
  double accumulation_factor() const { return 1.0 / window_; }
  int window_length() const { return window_; }
  int position_in_window() const { return position_; }
  // Micro-steps begun since construction: tells a new micro-step from another backward() of the
  // same one (a new window begins where this changes and position_in_window() is 1).
  std::uint64_t micro_steps() const { return micro_steps_; }

  // Where the window stands, for checkpoints: a resumed run continues the window it was saved in.
  struct Saved {
    int window = 0;
    int position = 0;
    bool collecting = false;
  };
  Saved saved() const { return {window_, position_, collecting_}; }
  void restore(const Saved& saved) {
    window_ = saved.window;
    position_ = saved.position;
    collecting_ = saved.collecting;
    open_ = false;
  }

 private:
  int steps_;
  int window_ = 0;     // length of the current window
  int position_ = 0;   // micro-steps begun in it (1-based once begun)
  std::uint64_t micro_steps_ = 0;
  bool open_ = false;  // a batch (or accumulate() scope) is in hand: backward() joins it
  bool collecting_ = false;
};

}  // namespace accel::detail
