// Reducer's members (reducer.hpp includes this file in header-only mode). With
// ACCEL_SEPARATE_COMPILATION, accel's separately compiled part instantiates the Reducer of each
// hook here, once, and reducer.hpp declares those instantiations extern.
#pragma once

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include "../../../detail/error.hpp"
#include "../../../runtime/direct_gloo.hpp"
#include "../../../runtime/shm/regions.hpp"
#include "../reducer.hpp"

namespace accel::parallel::detail {

template <class Hook>
Reducer<Hook>::Reducer(std::string_view strategy, runtime::ProcessGroup& group, std::string model,
                       std::vector<std::string> names, std::vector<torch::Tensor> parameters,
                       const DdpOptions& options, Hook hook)
    : strategy_(strategy), group_(group), model_(std::move(model)), names_(std::move(names)),
      parameters_(std::move(parameters)), options_(options), hook_(hook),
      slot_(parameters_.size()), arrived_(parameters_.size(), false),
      produced_(parameters_.size(), 0),
      // Without find_unused_parameters every parameter of a model the loss reaches has one.
      had_gradient_(parameters_.size(), options.find_unused_parameters ? 0 : 1),
      all_had_gradients_(!options.find_unused_parameters) {
  for (const auto& p : parameters_) trainable_.push_back(p.requires_grad());
  build_buckets();
  install_hooks();
}

template <class Hook>
Reducer<Hook>::~Reducer() = default;

template <class Hook>
void Reducer<Hook>::prepare_for_backward(bool sync) {
  check_still_trainable();
  sync_ = sync;
  if (!sync_) return;
  for (std::size_t i = 0; i < parameters_.size(); ++i) arrived_[i] = !trainable_[i];
  for (auto& bucket : buckets_) bucket.waiting = bucket.members.size();
  next_launch_ = 0;
  arrivals_ = 0;
}

template <class Hook>
void Reducer<Hook>::finalize() {
  if (!sync_) return;
  sync_ = false;
  if (arrivals_ == 0) return;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (arrived_[i]) continue;
    if (!options_.find_unused_parameters)
      accel::detail::fail(
          "{}: parameter '{}' of {} got no gradient in this backward on rank {}, although "
          "the loss reached other parameters of that model; every parameter that requires a "
          "gradient must take part in the loss: freeze it before prepare() "
          "(requires_grad_(false)), or set Options{{.ddp = {{.find_unused_parameters = "
          "true}}}} to treat it as a zero gradient",
          strategy_, names_[i], model_, group_.rank());
    // Unused in this backward: what earlier micro-steps of the window collected (PyTorch's
    // DDP sends the same), else zeros.
    Bucket& bucket = buckets_[slot_[i].bucket];
    torch::Tensor slot = bucket.flat.narrow(0, slot_[i].offset, parameters_[i].numel());
    if (const torch::Tensor& grad = parameters_[i].grad(); !grad.defined())
      slot.zero_();
    else if (!is_bucket_view(i))
      slot.copy_(grad.reshape(-1));
    produced_[i] = static_cast<char>(parameters_[i].grad().defined());
    arrived_[i] = true;
    --bucket.waiting;
  }
  launch_ready();
  if (options_.find_unused_parameters) agree_on_gradients();
  // Compressed buckets were divided before sending, shared ones averaged as they were summed.
  const bool averaged = Hook::divides_before_sending || regions_ != nullptr;
  for (auto& bucket : buckets_) {
    if (!bucket.after_backward)
      bucket.pending.wait();
    else if (bucket.registered)
      bucket.registered->run();
    else
      group_.allreduce_in_regions(*regions_, bucket.flat, inverse_);
    for (std::size_t i : bucket.members) {
      if (had_gradient_[i] == 0) continue;  // skipped by the optimizer, as on one process
      torch::Tensor& p = parameters_[i];
      torch::Tensor sum = bucket.flat.narrow(0, slot_[i].offset, p.numel()).view_as(p);
      // Averaged on the way to the gradient: one pass over the bytes, not a scaling pass over
      // the bucket and then a copy.
      const bool view = is_bucket_view(i);
      if (view || options_.gradients_as_bucket_views) {
        if (!averaged) sum.mul_(inverse_);
        if (!view) p.mutable_grad() = alias_of(bucket.flat, slot_[i].offset, p.sizes());
      } else if (!p.grad().defined()) {
        p.mutable_grad() = averaged ? sum.clone() : sum * inverse_;
      } else if (averaged) {
        p.mutable_grad().copy_(sum);
      } else {
        at::mul_out(p.mutable_grad(), sum, inverse_tensor_);
      }
    }
  }
}

template <class Hook>
void Reducer<Hook>::build_buckets() {
  const BucketCaps caps{options_.first_bucket_mb, options_.bucket_mb};
  std::vector<std::int64_t> numels;
  // Each bucket's place in a shared region: a cache line of its own, so that one rank's
  // backward and another's writing of the previous bucket's sum never share a line.
  std::vector<std::size_t> places;
  std::size_t shared_bytes = 0;
  for (auto& members : assign_buckets(parameters_, caps)) {
    Bucket& bucket = buckets_.emplace_back();
    std::int64_t numel = 0;
    for (std::size_t i : members) {
      slot_[i] = {buckets_.size() - 1, numel};
      numel += parameters_[i].numel();
    }
    numels.push_back(numel);
    places.push_back(shared_bytes);
    const auto bytes =
        static_cast<std::size_t>(numel) * parameters_[members.front()].element_size();
    shared_bytes += (bytes + 63) / 64 * 64;
    bucket.members = std::move(members);
  }
  if (shares_buckets()) {
    try {
      regions_ = group_.share_regions(shared_bytes);
    } catch (const accel::Error& error) {
      accel::detail::fail(
          "{}: could not place the gradient buckets of {} in shared memory ({} bytes for each "
          "of the {} ranks): {}; or keep the buckets private with Options{{.ddp = "
          "{{.buckets_in_shared_memory = false}}}} (under Docker, --shm-size makes /dev/shm "
          "larger)",
          strategy_, model_, shared_bytes, group_.size(),
          accel::detail::without_accel_prefix(error.what()));
    }
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    const auto options = parameters_[bucket.members.front()].options();
    const bool small = static_cast<double>(numels[b] * options.dtype().itemsize()) <=
                       options_.small_bucket_kb * 1024.0;
    if (regions_) {
      // Zeros already (a fresh segment); the storage keeps the segment mapped as long as any
      // gradient aliases it.
      bucket.flat = torch::from_blob(regions_->mine() + places[b], {numels[b]},
                                     [keep = regions_](void*) {}, options);
      bucket.after_backward = small;
    } else {
      bucket.flat = torch::zeros({numels[b]}, options);
      if (Hook::sends_the_bucket && small && runtime::DirectGloo::can_register(bucket.flat)) {
        bucket.registered = group_.register_allreduce(bucket.flat);
        bucket.after_backward = true;
      }
    }
  }
}

template <class Hook>
bool Reducer<Hook>::shares_buckets() const {
  if (!Hook::sends_the_bucket || !options_.buckets_in_shared_memory ||
      !group_.uses_shared_memory() || group_.size() < 2)
    return false;
  for (const Bucket& bucket : buckets_) {
    const torch::Tensor& p = parameters_[bucket.members.front()];
    if (!p.device().is_cpu() || (p.scalar_type() != torch::kFloat &&
                                 p.scalar_type() != torch::kDouble))
      return false;
  }
  return true;
}

template <class Hook>
void Reducer<Hook>::install_hooks() {
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (!trainable_[i]) continue;
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

template <class Hook>
void Reducer<Hook>::on_gradient(std::size_t i) {
  if (!sync_ || arrived_[i]) return;
  const torch::Tensor& p = parameters_[i];
  Bucket& bucket = buckets_[slot_[i].bucket];
  if (!is_bucket_view(i))
    bucket.flat.narrow(0, slot_[i].offset, p.numel()).copy_(p.grad().reshape(-1));
  arrived_[i] = true;
  produced_[i] = 1;
  ++arrivals_;
  if (--bucket.waiting == 0) launch_ready();
}

template <class Hook>
void Reducer<Hook>::agree_on_gradients() {
  if (!all_had_gradients_) {
    torch::Tensor any = torch::empty({static_cast<std::int64_t>(parameters_.size())}, torch::kInt);
    auto* flags = any.data_ptr<int>();
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      flags[i] = (produced_[i] | had_gradient_[i]) != 0 || !trainable_[i] ? 1 : 0;
    group_.allreduce(any, runtime::ReduceOp::max);
    all_had_gradients_ = true;
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      had_gradient_[i] = static_cast<char>(flags[i] != 0);
      all_had_gradients_ = all_had_gradients_ && flags[i] != 0;
    }
  }
  std::fill(produced_.begin(), produced_.end(), 0);
}

template <class Hook>
void Reducer<Hook>::check_still_trainable() const {
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (parameters_[i].requires_grad() != trainable_[i])
      accel::detail::fail(
          "{}: parameter '{}' of {} was {} after prepare(); gradient buckets are planned "
          "at prepare(), so set requires_grad before preparing the model (prepare it again "
          "in a new Accelerator to change which parameters train)",
          strategy_, names_[i], model_, trainable_[i] ? "frozen" : "unfrozen");
}

template <class Hook>
torch::Tensor Reducer<Hook>::alias_of(const torch::Tensor& flat, std::int64_t offset,
                                      torch::IntArrayRef shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return torch::empty({0}, flat.options())
      .set_(flat.storage(), flat.storage_offset() + offset, shape, strides);
}

template <class Hook>
bool Reducer<Hook>::is_bucket_view(std::size_t i) const {
  const torch::Tensor& grad = parameters_[i].grad();
  const Bucket& bucket = buckets_[slot_[i].bucket];
  return grad.defined() && grad.data_ptr() == static_cast<const char*>(bucket.flat.data_ptr()) +
                                                  slot_[i].offset * bucket.flat.element_size();
}

template <class Hook>
void Reducer<Hook>::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].waiting == 0) {
    Bucket& bucket = buckets_[next_launch_++];
    if (bucket.after_backward) continue;  // finalize() runs it
    bucket.pending = regions_ ? group_.allreduce_in_regions_async(regions_, bucket.flat, inverse_)
                              : hook_.send(group_, bucket.flat);
  }
}

#if defined(ACCEL_SEPARATE_COMPILATION)
template class Reducer<AllreduceHook>;
template class Reducer<CompressHook>;
#endif

}  // namespace accel::parallel::detail
