// The gradient reducer behind Ddp: PyTorch's Reducer idea on a stable API. Gradients are packed
// into flat buckets in reverse registration order (roughly the order backward produces them:
// the first bucket small, so communication starts early); a hook after each parameter's
// gradient accumulation copies the gradient into its bucket, and the bucket's asynchronous
// all-reduce starts as soon as its last gradient arrives, overlapping the rest of backward.
// Buckets start in index order on every rank, so the ranks' collectives always match.
//
// Small buckets (DdpOptions::small_bucket_kb) skip c10d: their all-reduce runs after backward,
// on this thread, over buffers registered with Gloo once (runtime/direct_gloo.hpp), where a
// c10d round trip would cost more than the bucket's whole transfer.
#pragma once

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../detail/error.hpp"
#include "../options.hpp"
#include "../runtime/process_group.hpp"

namespace accel::parallel {

class Reducer {
 public:
  // wire: the dtype gradients travel in when compressed (DdpWith<C>); empty for none.
  Reducer(runtime::ProcessGroup& group, std::vector<std::string> names,
          std::vector<torch::Tensor> parameters, const DdpOptions& options,
          std::optional<c10::ScalarType> wire = std::nullopt)
      : group_(group), names_(std::move(names)), parameters_(std::move(parameters)),
        options_(options), wire_(wire), slot_(parameters_.size()),
        arrived_(parameters_.size(), false) {
    build_buckets();
    install_hooks();
  }
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before loss.backward(): on a micro-step that does not end its window the hooks do nothing,
  // so there is no communication at all.
  void prepare_for_backward(bool sync) {
    sync_ = sync;
    if (!sync_) return;
    std::fill(arrived_.begin(), arrived_.end(), false);
    for (auto& bucket : buckets_) bucket.waiting = bucket.members.size();
    next_launch_ = 0;
  }

  // After loss.backward(): every bucket started, waited for, averaged and written back.
  void finalize() {
    if (!sync_) return;
    sync_ = false;
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      if (arrived_[i]) continue;
      if (!options_.find_unused_parameters)
        detail::fail(
            "Ddp: parameter '{}' got no gradient in this backward on rank {}; every parameter "
            "must take part in the loss, or set Options{{.ddp = {{.find_unused_parameters = "
            "true}}}} to treat it as a zero gradient",
            names_[i], group_.rank());
      Bucket& bucket = buckets_[slot_[i].bucket];
      bucket.flat.narrow(0, slot_[i].offset, parameters_[i].numel()).zero_();
      arrived_[i] = true;
      --bucket.waiting;
    }
    launch_ready();
    for (auto& bucket : buckets_) {
      if (bucket.registered)
        bucket.registered->run();
      else
        bucket.pending.wait();
      for (std::size_t i : bucket.members) {
        torch::Tensor& p = parameters_[i];
        torch::Tensor sum = bucket.flat.narrow(0, slot_[i].offset, p.numel()).view_as(p);
        // Averaged on the way to the gradient: one pass over the bytes, not a scaling pass over
        // the bucket and then a copy. Compressed buckets were divided before sending.
        const bool view = is_bucket_view(i);
        if (view || options_.gradients_as_bucket_views) {
          if (!wire_) sum.mul_(inverse_);
          if (!view) p.mutable_grad() = sum;
        } else if (!p.grad().defined()) {
          p.mutable_grad() = wire_ ? sum.clone() : sum * inverse_;
        } else if (wire_) {
          p.mutable_grad().copy_(sum);
        } else {
          at::mul_out(p.mutable_grad(), sum, inverse_tensor_);
        }
      }
    }
  }

  std::size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Slot {
    std::size_t bucket = 0;
    std::int64_t offset = 0;
  };
  struct Bucket {
    std::vector<std::size_t> members;
    torch::Tensor flat;
    std::size_t waiting = 0;
    runtime::ProcessGroup::Pending pending;
    // Set for a small bucket: reduced in finalize() on this thread instead of through c10d.
    std::optional<runtime::ProcessGroup::RegisteredAllreduce> registered;
  };

  // A bucket closes once it holds at least its cap, as PyTorch's buckets do: the first one then
  // ends with the first large gradient backward produces, so a sizeable all-reduce starts while
  // most of backward is still ahead (closing before the cap would leave that gradient for the
  // last bucket, and little to overlap).
  void build_buckets() {
    double cap = options_.first_bucket_mb;
    std::int64_t bytes = 0;
    bool open = false;
    for (std::size_t k = parameters_.size(); k-- > 0;) {  // reverse registration order
      const torch::Tensor& p = parameters_[k];
      if (!p.requires_grad()) continue;
      if (!open) {
        buckets_.emplace_back();
        bytes = 0;
        open = true;
      }
      slot_[k] = {buckets_.size() - 1, bytes / p.element_size()};
      buckets_.back().members.push_back(k);
      bytes += p.numel() * p.element_size();
      if (static_cast<double>(bytes) >= cap * 1048576.0) {
        open = false;
        cap = options_.bucket_mb;
      }
    }
    for (auto& bucket : buckets_) {
      std::int64_t numel = 0;
      for (std::size_t i : bucket.members) numel += parameters_[i].numel();
      bucket.flat = torch::zeros({numel}, parameters_[bucket.members.front()].options());
      const double bytes = static_cast<double>(numel * bucket.flat.element_size());
      if (!wire_ && bytes <= options_.small_bucket_kb * 1024.0 &&
          runtime::DirectGloo::can_register(bucket.flat))
        bucket.registered = group_.register_allreduce(bucket.flat);
    }
  }

  void install_hooks() {
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      if (!parameters_[i].requires_grad()) {
        arrived_[i] = true;
        continue;
      }
      // The tensor holds its accumulator weakly: keep it, or the hook silently never fires.
      auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[i]);
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, i](const torch::autograd::variable_list& outputs,
                    const torch::autograd::variable_list& /*inputs*/) {
            on_gradient(i);
            return outputs;
          }));
      accumulators_.push_back(std::move(accumulator));
    }
  }

  // Runs on the autograd thread once parameter i's .grad holds its accumulated value.
  void on_gradient(std::size_t i) {
    if (!sync_ || arrived_[i]) return;
    const torch::Tensor& p = parameters_[i];
    Bucket& bucket = buckets_[slot_[i].bucket];
    if (!is_bucket_view(i))
      bucket.flat.narrow(0, slot_[i].offset, p.numel()).copy_(p.grad().reshape(-1));
    arrived_[i] = true;
    if (--bucket.waiting == 0) launch_ready();
  }

  // True when parameter i's gradient already lives in its bucket slot.
  bool is_bucket_view(std::size_t i) const {
    const torch::Tensor& grad = parameters_[i].grad();
    const Bucket& bucket = buckets_[slot_[i].bucket];
    return grad.defined() && grad.data_ptr() == static_cast<const char*>(bucket.flat.data_ptr()) +
                                                    slot_[i].offset * bucket.flat.element_size();
  }

  // Starts every complete bucket from the next one in index order, stopping at the first
  // incomplete one: the same launch order on every rank.
  void launch_ready() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].waiting == 0) {
      Bucket& bucket = buckets_[next_launch_++];
      if (bucket.registered) continue;  // finalize() runs it
      if (wire_) {
        // Divided before the cast, as PyTorch's fp16 compression hook does, so that the sum of
        // W values cannot overflow fp16; the sum comes back into flat in fp32.
        bucket.pending = group_.allreduce_async(
            bucket.flat, bucket.flat.div(group_.size()).to(*wire_));
      } else {
        bucket.pending = group_.allreduce_async(bucket.flat);
      }
    }
  }

  runtime::ProcessGroup& group_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> parameters_;
  DdpOptions options_;
  std::optional<c10::ScalarType> wire_;
  std::vector<Slot> slot_;
  std::vector<bool> arrived_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::size_t next_launch_ = 0;
  bool sync_ = false;
  double inverse_ = 1.0 / group_.size();
  torch::Tensor inverse_tensor_ = torch::scalar_tensor(inverse_, torch::kDouble);
};

}  // namespace accel::parallel
