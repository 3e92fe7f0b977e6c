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
//                       (detail/shard_optimizers.hpp); the updated shards are all-gathered back
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
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "../options.hpp"
#include "../policy/parallelism.hpp"
#include "detail/bucket_assignment.hpp"
#include "memory_layout.hpp"
#include "detail/sharded_strategy.hpp"

namespace accel::parallel {

class ShardedGradientStrategy : public detail::ShardedStrategy {
  using Base = detail::ShardedStrategy;

 public:
  // name: the policy, as errors call it. The base's gradient hooks call gradient_arrived
  // through the callable given here.
  explicit ShardedGradientStrategy(std::string_view name)
      : Base(name, [this](std::size_t f, std::size_t i) { gradient_arrived(f, i); }) {}

  // The base steps the shards and says which flat parameters changed; after_shard_step brings
  // them back to where they live between steps.
  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    if (const std::vector<std::size_t>* stepped = step_shards(optimizer))
      after_shard_step(*stepped);
  }

  ACCEL_DECL void attach(runtime::ProcessGroup* process_group, const Options& options);

  ACCEL_DECL void prepare_model(torch::nn::Module& module, const std::string& label);

  // The parameters are whole on every rank between steps: nothing to gather for forward, or for
  // code outside it.
  void before_forward(torch::nn::Module& /*module*/) {}
  template <class Outputs>
  void after_forward(torch::nn::Module& /*module*/, const Outputs& /*outputs*/) {}
  void gather_full(torch::nn::Module& /*module*/) {}
  void release_full(torch::nn::Module& /*module*/) {}
  // The parameters are whole: an empty build is materialized whole before prepare_model.
  static constexpr bool deferred_models = false;
  // estimate_memory's question (memory_layout.hpp): one flat per gradient bucket, the buckets
  // assigned as prepare_model assigns them (Options::zero2's caps); on one process, the whole
  // model.
  ACCEL_DECL static MemoryLayout memory_layout(torch::nn::Module& model,
                                               const LayoutRequest& request);

  ACCEL_DECL void before_backward(bool sync);

  // In bucket order on every rank: what backward did not complete goes now, then everything in
  // flight lands.
  ACCEL_DECL void after_backward(bool sync);

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

  ACCEL_DECL bool takes_part(const Model& model) const;

  // On autograd's thread: parameter i of bucket f has its gradient.
  ACCEL_DECL void gradient_arrived(std::size_t f, std::size_t i);

  ACCEL_DECL void launch(std::size_t f);

  ACCEL_DECL void land_oldest();

  // Every rank's updated shard, back into every rank's full flat buffer.
  ACCEL_DECL void after_shard_step(const std::vector<std::size_t>& flats);

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

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/zero2.ipp"
#endif
