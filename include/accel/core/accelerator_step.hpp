// The Accelerator's training step, its members defined here rather than in the class
// (accelerator_class.hpp, which includes this file at its end, and documents the public ones):
// backward and its token-weighted form, clipping and unscaling, end_training and memory_use, and
// the private handle protocol the prepared handles call (core/prepared.hpp: forward,
// optimizer_step, optimizer_zero_grad), with the checks between them (a window's gradients left
// unused, the division by a window's tokens).
#pragma once

#include "../accelerator_class.hpp"
#include "../detail/bytes.hpp"
#include "../detail/small_tensor.hpp"
#include "../parallel/detail/clip.hpp"
#include "../profiling/span.hpp"
#include "../runtime/progress_record.hpp"

#include <span>

namespace accel {

template <class Par, class Prec, class Acc>
void Accelerator<Par, Prec, Acc>::backward(const torch::Tensor& loss) {
  const profiling::Span span(profiling::Phase::backward, "backward");
  gradients_.on_backward();
  check_last_window_used();
  gradients_.on_mean_loss();
  precision_.on_backward({gradients_.micro_steps(), gradients_.position_in_window()});
  const bool sync = gradients_.sync_gradients();
  strategy_.before_backward(sync);
  const torch::Tensor averaged =
      gradients_.window_length() == 1 ? loss : loss * gradients_.accumulation_factor();
  precision_.scale_loss(averaged).backward();
  strategy_.after_backward(sync);
  if (sync) unused_window_ = gradients_.micro_steps();
}

template <class Par, class Prec, class Acc>
template <std::integral Count>
  requires(!std::same_as<Count, bool>)
void Accelerator<Par, Prec, Acc>::backward(const torch::Tensor& loss_sum, Count tokens) {
  const profiling::Span span(profiling::Phase::backward, "backward");
  gradients_.on_backward();
  check_last_window_used();
  gradients_.on_token_loss(tokens);
  precision_.on_backward({gradients_.micro_steps(), gradients_.position_in_window()});
  const bool sync = gradients_.sync_gradients();
  strategy_.before_backward(sync);
  precision_.scale_loss(loss_sum).backward();
  strategy_.after_backward(sync);
  if (sync) unused_window_ = gradients_.micro_steps();
}

template <class Par, class Prec, class Acc>
double Accelerator<Par, Prec, Acc>::clip_grad_norm(const std::vector<torch::Tensor>& parameters,
                                                   double max_norm, double norm_type) {
  // Loss scaling: the window's gradients are unscaled first (once); mid-window they are still
  // scaled, and only their measure is divided back.
  if (sync_gradients()) unscale_gradients();
  return parallel::detail::clip_grad_norm(strategy_, parameters, max_norm, norm_type,
                                          sync_gradients()) /
         (sync_gradients() ? 1.0 : precision_.loss_scale());
}

template <class Par, class Prec, class Acc>
void Accelerator<Par, Prec, Acc>::clip_grad_value(const std::vector<torch::Tensor>& parameters,
                                                  double clip_value) {
  parallel::detail::check_clip_value(clip_value);
  if (!sync_gradients()) return;
  unscale_gradients();
  parallel::detail::clip_grad_value(strategy_, parameters, clip_value);
}

template <class Par, class Prec, class Acc>
void Accelerator<Par, Prec, Acc>::unscale_gradients() {
  if (!sync_gradients()) return;
  divide_by_window_tokens();
  for (auto* optimizer : optimizers_) precision_.unscale(strategy_, *optimizer);
}

template <class Par, class Prec, class Acc>
void Accelerator<Par, Prec, Acc>::end_training() {
  if (const std::string failure = checkpoints_.background.wait(); !failure.empty())
    throw Error(failure);
  if (recorder_ != nullptr && recorder_->timeline()) {
    recorder_->close_pending_step();
    log_timeline();
  }
  tracking::WithTrackers<Accelerator>::end_training();
}

template <class Par, class Prec, class Acc>
MemoryUse Accelerator<Par, Prec, Acc>::memory_use() const {
  state::MemoryCounter counter;
  strategy_.count_memory(counter);
  for (const auto& module : models_)
    for (const auto& p : module->parameters()) {
      counter.parameter(p);
      counter.gradient(p.grad());
    }
  for (const auto* optimizer : optimizers_) counter.optimizer_state(*optimizer);
  MemoryUse use = counter.use();
  use.checkpoint_snapshot = checkpoints_.background.snapshot_bytes();
  return use;
}

template <class Par, class Prec, class Acc>
template <class Holder, class... Args>
auto Accelerator<Par, Prec, Acc>::forward(Holder& module, Args&&... args) {
  const profiling::Span span(profiling::Phase::forward, "forward");
  auto& whole = static_cast<torch::nn::Module&>(*module);
  strategy_.before_forward(whole);
  precision::Autocast<precision_policy> guard(device_);
  auto outputs = precision::outputs_to_fp32<precision_policy>(
      module->forward(std::forward<Args>(args)...));
  strategy_.after_forward(whole, outputs);
  return outputs;
}

// On the window's last micro-step, unless the precision policy skips it (Fp16: inf/nan in the
// gradients on some rank).
template <class Par, class Prec, class Acc>
template <class Optimizer>
void Accelerator<Par, Prec, Acc>::optimizer_step(Optimizer& optimizer) {
  if (!sync_gradients()) return;
  {
    const profiling::Span span(profiling::Phase::optimizer, "optimizer step");
    unused_window_.reset();
    if (counted_micro_step_ != gradients_.micro_steps()) {  // once per window, for all optimizers
      counted_micro_step_ = gradients_.micro_steps();
      ++completed_steps_;
    }
    divide_by_window_tokens();
    if (precision_.may_step(strategy_, optimizer)) strategy_.optimizer_step(optimizer);
  }
  if (process_.rank == 0) runtime::record_steps(completed_steps_);  // for the launcher
  if (recorder_ != nullptr) {
    recorder_->optimizer_stepped(completed_steps_);
    if (recorder_->timeline() &&
        recorder_->steps_ready() >= static_cast<std::size_t>(options_.timeline.every))
      log_timeline();
  }
}

// The timeline's finished steps, logged while a run is open (take_timeline_rows).
template <class Par, class Prec, class Acc>
void Accelerator<Par, Prec, Acc>::log_timeline() {
  for (const auto& row : take_timeline_rows(this->run_tracker().is_open()))
    this->log(row.metrics, row.step);
}

// Zeroes gradients (in place, parallel/replicated.hpp) unless a window is still collecting them.
template <class Par, class Prec, class Acc>
template <class Optimizer>
void Accelerator<Par, Prec, Acc>::optimizer_zero_grad(Optimizer& optimizer) {
  if (gradients_.collecting()) return;
  unused_window_.reset();
  strategy_.zero_grad(optimizer);
}

// Under Zero2, Zero3 and the sharding Fsdp kinds a window's gradients live in accel's shards:
// only a prepared optimizer's step() applies them and only its zero_grad() drops them. A
// program that steps the torch optimizer itself (or one never passed to prepare()) would
// train nothing without a word, so the next micro-step's backward() stops it. Several
// backward() calls on one micro-step (a GAN's two losses) are fine.
template <class Par, class Prec, class Acc>
void Accelerator<Par, Prec, Acc>::check_last_window_used() const {
  if constexpr (shards_gradients_v<parallelism_policy>) {
    if (unused_window_ && *unused_window_ != gradients_.micro_steps())
      detail::fail(
          "backward(): the gradients of the last window (micro-step {}) were neither applied "
          "nor dropped by a prepared optimizer: under {} they live in accel's shards, not in "
          "the parameters' .grad, so a torch::optim optimizer stepped directly (or one not "
          "passed to prepare()) changes nothing, and torch::nn::utils::clip_grad_norm_ sees "
          "no gradient. Call step() and zero_grad() on the optimizer prepare() returned, and "
          "accelerator.clip_grad_norm(max_norm) to clip (docs/reference/accelerator.md, \"The right "
          "doors\")",
          *unused_window_, parallelism_policy::name);
  }
}

// Token-weighted windows (backward(loss_sum, tokens)), once on the last micro-step: every
// strategy holds the gradient sums averaged over the W ranks (Ddp every parameter's, the
// sharded strategies this rank's shard), so they are multiplied by W / the window's tokens
// summed over the ranks: the sum over every rank and micro-step divided by that count.
template <class Par, class Prec, class Acc>
void Accelerator<Par, Prec, Acc>::divide_by_window_tokens() {
  if (!sync_gradients() || gradients_.loss_kind() != detail::GradientState::LossKind::token_sum ||
      gradients_.tokens_divided())
    return;
  gradients_.mark_tokens_divided();
  // Gathered, not all-reduced: the sum is checked for overflow (a wrapped one would divide the
  // gradients by a wrong count), and its error names every rank's count.
  const torch::Tensor mine = detail::one_value(gradients_.window_tokens(), torch::kLong);
  const torch::Tensor counts = group_ ? group_->allgather(mine) : mine.reshape({1});
  // A span over the tensor, not a vector copied from it: g++ 12 at -O3 reports a false
  // -Wfree-nonheap-object on that copy's destructor, which -Werror builds turn into an error.
  const std::span<const std::int64_t> count(counts.data_ptr<std::int64_t>(),
                                            static_cast<std::size_t>(counts.numel()));
  const std::int64_t tokens = detail::GradientState::sum_of_rank_tokens(count);
  if (tokens <= 0)
    detail::fail("backward(loss_sum, tokens): this accumulation window counted {} tokens on {} "
                 "rank(s) ({} here); its gradients are divided by that count, so at least one "
                 "micro-batch of the window must have a token on some rank",
                 tokens, num_processes(), gradients_.window_tokens());
  parallel::detail::scale_gradients(strategy_, prepared_parameters(),
                                    static_cast<double>(num_processes()) /
                                        static_cast<double>(tokens));
}

}  // namespace accel
