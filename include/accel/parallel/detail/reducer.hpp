// The gradient reducer behind Ddp: PyTorch's Reducer idea on a stable API. Gradients are packed
// into flat buckets in reverse registration order (roughly the order backward produces them:
// the first bucket small, so communication starts early); a hook after each parameter's
// gradient accumulation copies the gradient into its bucket, and the bucket's asynchronous
// all-reduce starts as soon as its last gradient arrives, overlapping the rest of backward.
// Buckets start in index order on every rank, so the ranks' collectives always match.
//
// Which backward a Reducer takes part in: one where at least one of its model's gradients
// arrives. A model that a loss does not reach at all (the generator during a GAN's
// discriminator backward, whose input was detached) is left alone; its gradients stay as they
// are for the backward that does reach it. Under DdpOptions::find_unused_parameters a parameter
// without a gradient on this rank counts as zeros; one that no rank has ever had a gradient for
// keeps an undefined .grad, as on one process, so the optimizer skips it (one all-reduce of an
// integer per parameter after the buckets start, until every parameter has had a gradient).
// Parameters that do not require a gradient are in no
// bucket; freezing or unfreezing one after prepare() is refused, since the buckets, and the
// other ranks' collectives, were planned without it.
//
// Small buckets (DdpOptions::small_bucket_kb) skip c10d: their all-reduce runs after backward,
// on this thread, over buffers registered with Gloo once (runtime/direct_gloo.hpp), where a
// c10d round trip would cost more than the bucket's whole transfer.
//
// On one host with the shared-memory path (DdpOptions::buckets_in_shared_memory), the buckets
// live in shared memory that every rank maps (runtime/shm/regions.hpp) and are all-reduced and
// averaged where they lie, in one pass: nothing is copied through the transport.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../../options.hpp"
#include "../../runtime/process_group.hpp"
#include "bucket_assignment.hpp"
#include "comm_hook.hpp"

namespace accel::parallel::detail {

// Hook: what each bucket's all-reduce sends (comm_hook.hpp). The members are defined in
// impl/reducer.ipp; with ACCEL_SEPARATE_COMPILATION the two hooks' Reducers are compiled once, in
// accel's separately compiled part, and a program's translation units only call them.
template <class Hook>
class Reducer {
 public:
  // strategy: the policy's full name, as errors start ("Ddp", "Fsdp<NoShard>"); model: how
  // errors name the model ("the model prepared first (Sequential)").
  Reducer(std::string_view strategy, runtime::ProcessGroup& group, std::string model,
          std::vector<std::string> names, std::vector<torch::Tensor> parameters,
          const DdpOptions& options, Hook hook = {});
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;
  ~Reducer();

  // Before loss.backward(): on a micro-step that does not end its window the hooks do nothing,
  // so there is no communication at all.
  void prepare_for_backward(bool sync);

  // After loss.backward(): every bucket started, waited for, averaged and written back; nothing
  // when the loss did not reach this model.
  void finalize();

 private:
  struct Slot {
    std::size_t bucket = 0;
    std::int64_t offset = 0;
  };
  struct Bucket {
    std::vector<std::size_t> members;
    torch::Tensor flat;
    std::size_t waiting = 0;
    runtime::PendingCollective pending;
    // A small bucket: all-reduced in finalize() on this thread, not asynchronously: in shared
    // memory where the buckets are, else over Gloo's registered buffers (`registered`).
    bool after_backward = false;
    std::optional<runtime::ProcessGroup::RegisteredAllreduce> registered;
  };

  void build_buckets();
  // Whether the buckets go into shared memory: the same answer on every rank.
  bool shares_buckets() const;
  void install_hooks();
  // Runs on the autograd thread once parameter i's .grad holds its accumulated value.
  void on_gradient(std::size_t i);
  void check_still_trainable() const;
  // The bucket's slot at `offset`, shaped like a parameter, sharing the bucket's storage but not
  // an autograd view of it: the user's own optimizer.zero_grad() (detach_() then zero_() on
  // libtorch 1.13) then zeroes the slot as it would any gradient, where on a view it fails with
  // "Can't detach views in-place".
  static torch::Tensor alias_of(const torch::Tensor& flat, std::int64_t offset,
                                torch::IntArrayRef shape);
  // True when parameter i's gradient already lives in its bucket slot.
  bool is_bucket_view(std::size_t i) const;
  // Starts every complete bucket from the next one in index order, stopping at the first
  // incomplete one: the same launch order on every rank.
  void launch_ready();
  // find_unused_parameters, after every bucket started: had_gradient_ from every rank's produced_.
  void agree_on_gradients();

  std::string_view strategy_;
  runtime::ProcessGroup& group_;
  std::string model_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> parameters_;
  DdpOptions options_;
  Hook hook_;
  std::vector<Slot> slot_;
  std::vector<bool> trainable_;  // requires_grad at prepare(): the parameters in buckets
  std::vector<bool> arrived_;
  std::size_t arrivals_ = 0;  // gradients arrived in this backward
  // find_unused_parameters: whether each parameter's gradient came from autograd in this
  // backward (not zeros filled in), and whether any rank has had one for it so far.
  std::vector<char> produced_, had_gradient_;
  bool all_had_gradients_ = false;
  std::vector<Bucket> buckets_;
  std::shared_ptr<runtime::shm::Regions> regions_;  // where the buckets live, when shared
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::size_t next_launch_ = 0;
  bool sync_ = false;
  double inverse_ = 1.0 / group_.size();
  torch::Tensor inverse_tensor_ = torch::scalar_tensor(inverse_, torch::kDouble);
};


#if defined(ACCEL_SEPARATE_COMPILATION)
extern template class Reducer<AllreduceHook>;
extern template class Reducer<CompressHook>;
#endif

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/reducer.ipp"
#endif
