// Where a micro-step stands inside its accumulation window. The window is GradAccum's N
// micro-batches, except the last window of an epoch, which is as long as the batches left:
// its loss is scaled by 1/(its real length), so that the update it makes has the same size as a
// full one (Accelerate divides by N there, which under-scales that update).
//
// A micro-step is a batch, not a backward(): it begins when a prepared loader yields a batch
// (or at Accelerator::accumulate() in a loop without one) and lasts until the next one begins,
// so several backward() calls on one batch (a GAN's two losses, several models) share it. In a
// loop with neither, each backward() is a micro-step of its own.
//
// A window's losses are of one kind: means (backward(loss), scaled by 1/window length) or sums
// over counted tokens (backward(loss_sum, tokens)), whose gradients are divided by the window's
// token count over every rank once the window's last micro-step has collected them.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "error.hpp"

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
      begin_window_losses();
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
  // GradAccum's N: a full window's micro-steps.
  int accumulation_steps() const { return steps_; }

  // --- What kind of loss the window's backward() calls pass ------------------------------------
  enum class LossKind { none, mean, token_sum };
  LossKind loss_kind() const { return kind_; }

  // backward(loss): a mean loss, scaled by accumulation_factor().
  void on_mean_loss() {
    if (kind_ == LossKind::token_sum)
      fail("backward(loss) in an accumulation window that already called "
           "backward(loss_sum, tokens); a window's gradients are either means (scaled by 1/{}) or "
           "sums divided by the window's token count, not both: pass every loss of the window "
           "as a sum with its token count, or every one as a mean",
           window_);
    kind_ = LossKind::mean;
  }
  // backward(loss_sum, tokens): a loss summed over `tokens` counted items (0 allowed: a
  // micro-batch of padding only), added to the window's count. Counts are std::int64_t: one
  // beyond it (an unsigned 2^63) is refused, not wrapped to a negative number.
  template <std::integral Count>
  void on_token_loss(Count tokens) {
    if (std::cmp_less(tokens, 0))
      fail("backward(loss_sum, tokens): tokens is {}; it is the number of items (e.g. non-padding "
           "target tokens) loss_sum adds up, 0 or more",
           tokens);
    if (!std::in_range<std::int64_t>(tokens))
      fail("backward(loss_sum, tokens): tokens is {}, more than accel counts ({}, the largest "
           "std::int64_t); it is the number of items (e.g. non-padding target tokens) loss_sum "
           "adds up",
           tokens, std::numeric_limits<std::int64_t>::max());
    add_tokens(static_cast<std::int64_t>(tokens));
  }

  // The window's token count over the ranks, from each rank's count (rank order): the sum,
  // checked. An overflow fails naming the counts, on every rank alike (they all hold them).
  static std::int64_t sum_of_rank_tokens(std::span<const std::int64_t> counts) {
    std::int64_t total = 0;
    bool overflow = false;
    for (const std::int64_t c : counts)
      overflow = overflow || c < 0 || __builtin_add_overflow(total, c, &total);
    if (!overflow) return total;
    std::string listed;
    for (std::size_t r = 0; r < counts.size() && r < 8; ++r)
      listed += fmt::format("{}{} on rank {}", r == 0 ? "" : ", ", counts[r], r);
    if (counts.size() > 8) listed += ", ...";
    fail("backward(loss_sum, tokens): this accumulation window's token counts ({}) add up to more "
         "than {} (the largest std::int64_t) over its {} rank(s); its gradients are divided by "
         "that sum: pass each micro-batch's count of the items loss_sum adds up (non-padding "
         "target tokens, say)",
         listed, std::numeric_limits<std::int64_t>::max(), counts.size());
  }

 private:
  void add_tokens(std::int64_t tokens) {
    if (kind_ == LossKind::mean)
      fail("backward(loss_sum, tokens) in an accumulation window that already called "
           "backward(loss); a window's gradients are either means (scaled by 1/{}) or sums "
           "divided by the window's token count, not both: pass every loss of the window as a sum "
           "with its token count, or every one as a mean",
           window_);
    if (tokens_divided_)
      fail("backward(loss_sum, tokens) after this window's gradients were divided by its token "
           "count (by clip_grad_norm(), unscale_gradients() or optimizer.step() on its last "
           "micro-step); make every backward() of the window's last batch before any of them "
           "(several losses of one batch: add them into one loss_sum)");
    std::int64_t sum = 0;
    if (__builtin_add_overflow(tokens_, tokens, &sum))
      fail("backward(loss_sum, tokens): tokens is {} and this accumulation window already counted "
           "{} on this rank: together more than {} (the largest std::int64_t); pass each "
           "micro-batch's count of the items loss_sum adds up (non-padding target tokens, say)",
           tokens, tokens_, std::numeric_limits<std::int64_t>::max());
    kind_ = LossKind::token_sum;
    tokens_ = sum;
  }

 public:
  // Tokens this rank's backward(loss_sum, tokens) calls passed in this window.
  std::int64_t window_tokens() const { return tokens_; }
  // Whether this window's gradients were divided by its token count already (once per window).
  bool tokens_divided() const { return tokens_divided_; }
  void mark_tokens_divided() { tokens_divided_ = true; }

  // Where the window stands, for checkpoints: a resumed run continues the window it was saved in.
  // Mid-window a token-weighted window's count is not saved yet: refused rather than resumed
  // with the tokens counted before the save forgotten.
  struct Saved {
    int window = 0;
    int position = 0;
    bool collecting = false;
  };
  Saved saved() const {
    if (collecting_ && kind_ == LossKind::token_sum)
      fail("save_state() in the middle of an accumulation window of backward(loss_sum, tokens) "
           "({} of {} micro-steps, {} tokens counted on this rank): a checkpoint does not keep "
           "the window's token count yet; save after optimizer.step() on a window's last "
           "micro-step (sync_gradients())",
           position_, window_, tokens_);
    return {window_, position_, collecting_};
  }
  void restore(const Saved& saved) {
    window_ = saved.window;
    position_ = saved.position;
    collecting_ = saved.collecting;
    open_ = false;
    begin_window_losses();
  }

 private:
  int steps_;
  int window_ = 0;     // length of the current window
  int position_ = 0;   // micro-steps begun in it (1-based once begun)
  std::uint64_t micro_steps_ = 0;
  bool open_ = false;  // a batch (or accumulate() scope) is in hand: backward() joins it
  bool collecting_ = false;
  LossKind kind_ = LossKind::none;  // of this window's losses
  std::int64_t tokens_ = 0;         // this window's, on this rank
  bool tokens_divided_ = false;

  void begin_window_losses() {
    kind_ = LossKind::none;
    tokens_ = 0;
    tokens_divided_ = false;
  }
};

}  // namespace accel::detail
