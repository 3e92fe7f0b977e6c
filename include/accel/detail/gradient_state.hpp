// Where a micro-step stands inside its accumulation window. The window is GradAccum's N
// micro-batches, except the last window of an epoch, which is as long as the batches left:
// its loss is scaled by 1/(its real length), so that the update it makes has the same size as a
// full one (Accelerate divides by N there, which under-scales that update).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

namespace accel::detail {

class GradientState {
 public:
  explicit GradientState(int accumulation_steps) : steps_(accumulation_steps) {}

  // A micro-step begins: when a prepared loader yields a batch (it knows how many batches the
  // epoch still holds, this one included), or at backward() in a loop without one.
  void begin_micro_step(std::optional<std::int64_t> batches_left = std::nullopt,
                        bool first_of_epoch = false) {
    if (first_of_epoch || position_ == window_) {
      window_ = steps_;
      if (batches_left) window_ = static_cast<int>(std::min<std::int64_t>(steps_, *batches_left));
      position_ = 0;
    }
    ++position_;
    awaiting_backward_ = true;
  }

  // backward() consumes the micro-step begun for it; a second backward() in a loop without a
  // prepared loader begins the next one.
  void on_backward() {
    if (!awaiting_backward_) begin_micro_step();
    awaiting_backward_ = false;
  }

  // True on the micro-step that ends its window: gradients are synchronised and the optimizer
  // steps. Known as soon as the loader yields the batch.
  bool sync_gradients() const { return position_ == window_; }
  // The loss of each micro-step is multiplied by this.
  double loss_scale() const { return 1.0 / window_; }
  int window_length() const { return window_; }
  int position_in_window() const { return position_; }
  int accumulation_steps() const { return steps_; }

 private:
  int steps_;
  int window_ = 0;    // length of the current window
  int position_ = 0;  // micro-steps begun in it (1-based once begun)
  bool awaiting_backward_ = false;
};

}  // namespace accel::detail
