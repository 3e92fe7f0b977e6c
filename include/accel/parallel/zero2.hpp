// Zero2 (DeepSpeed ZeRO stage 2; Fsdp<ShardGradOp> is the same memory model): parameters
// replicated, gradients and optimizer state sharded across ranks.
//
//   prepare(model)      parameters and buffers broadcast from rank 0; the trainable parameters
//                       cut into buckets as Ddp's are (reverse registration order, one dtype
//                       each, Options::zero2's caps: detail/bucket_assignment.hpp), each bucket
//                       flattened into one buffer padded to a multiple of the world size
//                       (flat_parameter.hpp); rank r owns the r-th contiguous shard of
//                       every bucket.
//   backward            as each gradient arrives it is copied into its bucket's full gradient,
//                       allocated at the bucket's first gradient. On the micro-step that ends a
//                       window, a bucket whose gradients have all arrived is reduce-scattered
//                       (mean) into this rank's shard gradient, buckets in index order on every
//                       rank, and its full gradient freed as the reduce-scatter lands; with
//                       Options::zero2.reduce_scatters_in_flight > 0, that many run on the
//                       shared-memory path's thread while autograd goes on.
//                       After autograd the rest follow in order (a parameter the loss did not
//                       reach sends zeros). Other micro-steps: no communication, the full
//                       gradients accumulate.
//   optimizer.step()    an optimizer of the user's type steps this rank's shards
//                       (detail/sharded_strategy.hpp); the updated shards are all-gathered back
//                       into every rank's buffers. With Options::offload.optimizer it steps CPU
//                       copies of them, and the updated values come back to the device first.
//
// Which backward a model takes part in: one that reaches at least one of its gradients, or whose
// window collected some; a model no loss reached (a GAN's generator during its discriminator's
// backward) sends nothing. Gradients are linear in the loss, so a window's reduce-scatters may
// be split: a model reached by several backward() calls of one micro-step is reduce-scattered
// after each, and each result is added to its shard gradient.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <deque>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../options.hpp"
#include "../policy/parallelism.hpp"
#include "detail/bucket_assignment.hpp"
#include "detail/sharded_strategy.hpp"

namespace accel::parallel {

class ShardedGradientStrategy : public detail::ShardedStrategy<ShardedGradientStrategy> {
  using Base = detail::ShardedStrategy<ShardedGradientStrategy>;
  friend Base;

 public:
  using Base::Base;

  void attach(runtime::ProcessGroup* process_group, const Options& options) {
    Base::attach(process_group, options);
    const Zero2Options& zero2 = options.zero2;
    if (!(zero2.first_bucket_mb > 0) || !(zero2.bucket_mb > 0) || zero2.reduce_scatters_in_flight < 0)
      accel::detail::fail("{}: Options::zero2 has first_bucket_mb {}, bucket_mb {} and "
                          "reduce_scatters_in_flight {}; the caps must be positive and the "
                          "reduce-scatters in flight 0 or more (the defaults: 1, 25 and 0)",
                          name_, zero2.first_bucket_mb, zero2.bucket_mb,
                          zero2.reduce_scatters_in_flight);
    if (options.offload.parameters)
      accel::detail::fail("{}: Options::offload.parameters keeps parameter shards on the CPU "
                          "between uses, and {} keeps every parameter whole on each rank (only "
                          "gradients and optimizer state are sharded); use Zero3 or "
                          "Fsdp<FullShard> to offload parameters, or offload.optimizer alone",
                          name_, name_);
    caps_ = {zero2.first_bucket_mb, zero2.bucket_mb};
    max_in_flight_ = static_cast<std::size_t>(zero2.reduce_scatters_in_flight);
  }

  void prepare_model(torch::nn::Module& module, const std::string& label) {
    if (group_ == nullptr) return;
    begin_prepare(module, label);
    // Each parameter once, in registration order: one registered under two names (tied
    // weights), or already flattened with a model prepared earlier, is not bucketed again.
    Named unique;
    std::vector<torch::Tensor> parameters;
    std::unordered_set<const void*> seen;
    for (const auto& item : module.named_parameters()) {
      const torch::Tensor& p = item.value();
      if (is_flattened(p) || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      unique.emplace_back(item.key(), p);
      parameters.push_back(p);
    }
    Named frozen;
    for (const auto& entry : unique)
      if (!entry.second.requires_grad()) frozen.push_back(entry);
    flatten(frozen, label, Residency::replicated);  // recorded, not flattened
    Model& model = models_.emplace_back();
    for (const auto& members : detail::assign_buckets(parameters, caps_)) {
      Named bucket;
      for (const std::size_t k : members) bucket.push_back(unique[k]);
      for (const std::size_t f : flatten(bucket, label, Residency::replicated)) {
        model.flats.push_back(f);
        model_of_.resize(f + 1, 0);
        model_of_[f] = models_.size() - 1;
      }
    }
    waiting_.resize(flats_.size(), 0);
  }

  // The parameters are whole on every rank between steps: nothing to gather for forward, or for
  // code outside it.
  void before_forward(torch::nn::Module& /*module*/) {}
  template <class Outputs>
  void after_forward(torch::nn::Module& /*module*/, const Outputs& /*outputs*/) {}
  void gather_full(torch::nn::Module& /*module*/) {}
  void release_full(torch::nn::Module& /*module*/) {}

  void before_backward(bool sync) {
    if (group_ == nullptr) return;
    begin_backward(sync);
    sync_ = sync;
    for (auto& model : models_) {
      model.launched = 0;
      model.reached = false;
    }
    for (std::size_t f = 0; f < flats_.size(); ++f) waiting_[f] = flats_[f]->parameters().size();
  }

  // In bucket order on every rank: what backward did not complete goes now, then everything in
  // flight lands.
  void after_backward(bool sync) {
    if (group_ == nullptr || !sync) return;
    for (auto& model : models_) {
      if (!takes_part(model)) {
        for (const std::size_t f : model.flats) flats_[f]->release_gradients();
        continue;
      }
      while (model.launched < model.flats.size()) {
        const std::size_t f = model.flats[model.launched++];
        flats_[f]->attach_gradients();  // zeros where no gradient arrived
        launch(f);
      }
    }
    while (!in_flight_.empty()) land_oldest();
    sharded_ = true;
  }

  // Buckets whose reduce-scatter has been started and has not landed (at most
  // Options::zero2.reduce_scatters_in_flight).
  std::size_t reduce_scatters_in_flight() const { return in_flight_.size(); }

 private:
  using Named = std::vector<std::pair<std::string, torch::Tensor>>;

  struct Model {
    std::vector<std::size_t> flats;  // its buckets, in the order they are reduce-scattered
    std::size_t launched = 0;        // buckets started in this backward
    bool reached = false;            // by this backward
  };
  struct InFlight {
    std::size_t flat;
    runtime::ProcessGroup::PendingCollective reduce_scatter;
  };

  bool takes_part(const Model& model) const {
    if (model.reached) return true;
    for (const std::size_t f : model.flats)
      if (pending_[f] != 0) return true;
    return false;
  }

  // On autograd's thread: parameter i of bucket f has its gradient.
  void gradient_arrived(std::size_t f, std::size_t i) {
    flats_[f]->attach_gradient(i);
    if (!sync_) return;
    Model& model = models_[model_of_[f]];
    model.reached = true;
    if (waiting_[f] == 0 || --waiting_[f] != 0) return;
    // Complete buckets start from the next one in order, stopping at the first incomplete one.
    while (model.launched < model.flats.size() && waiting_[model.flats[model.launched]] == 0)
      launch(model.flats[model.launched++]);
  }

  void launch(std::size_t f) {
    pending_[f] = 1;
    in_flight_.push_back({f, start_reduce_scatter(f)});
    while (in_flight_.size() > max_in_flight_) land_oldest();
  }

  void land_oldest() {
    InFlight landed = std::move(in_flight_.front());
    in_flight_.pop_front();
    landed.reduce_scatter.wait();
    add_to_shard(landed.flat, landed.reduce_scatter.result);
    flats_[landed.flat]->release_gradients();
  }

  // Every rank's updated shard, back into every rank's full flat buffer.
  void after_shard_step(const std::vector<std::size_t>& flats) {
    torch::NoGradGuard no_grad;
    for (const std::size_t f : flats) {
      FlatParameter& flat = *flats_[f];
      shard_group_->allgather_into(flat.flat(), flat.shard());
    }
  }

  detail::BucketCaps caps_;
  std::size_t max_in_flight_ = 0;
  std::vector<Model> models_;
  std::vector<std::size_t> model_of_;  // per flat parameter
  std::vector<std::size_t> waiting_;   // per flat parameter: gradients not yet arrived
  std::deque<InFlight> in_flight_;
  bool sync_ = true;  // this backward ends its window
};

template <>
struct Strategy<Zero2> : ShardedGradientStrategy {
  Strategy() : ShardedGradientStrategy(Zero2::name) {}
};

}  // namespace accel::parallel
