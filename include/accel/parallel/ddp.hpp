// Ddp: replicated parameters, gradients averaged across ranks on the micro-step that ends an
// accumulation window (no communication on the others). Parameters and buffers are broadcast
// from rank 0 at prepare, so every rank starts from the same model.
//
// The gradients travel in buckets whose all-reduces overlap backward (detail/reducer.hpp). An
// optimizer that already holds state at prepare() (it stepped, or a checkpoint was loaded into
// it) gets rank 0's state on every rank, so the ranks keep training one model.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "../policy/parallelism.hpp"
#include "../precision/autocast.hpp"
#include "../runtime/any_rank.hpp"
#include "../runtime/process_group.hpp"
#include "detail/broadcast.hpp"
#include "detail/reducer.hpp"
#include "fused_step.hpp"
#include "replicated.hpp"

namespace accel::parallel {

// Ddp's behaviour, whatever its buckets send (Hook, detail/comm_hook.hpp). Everything but the
// training step is replicated (replicated.hpp).
template <class Hook>
struct DdpStrategy : ReplicatedGradients, WholeParameters, ReplicatedCheckpoint {
  void attach(runtime::ProcessGroup* process_group, const Options& options);
  void prepare_model(torch::nn::Module& module, const std::string& label);

  template <class Optimizer>
  void prepare_optimizer(Optimizer& optimizer) {
    share_optimizer_state(optimizer);
  }

  void before_forward(torch::nn::Module& module);

  template <class Outputs>
  void after_forward(torch::nn::Module& /*module*/, const Outputs& /*outputs*/) {}

  void before_backward(bool sync);
  void after_backward(bool sync);

  // The gradients are averaged by the time backward returns: each rank steps its own replica
  // (fused where it applies: fused_step.hpp).
  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    step_optimizer(optimizer, fused_optimizer_);
  }
  template <class Optimizer>
  void zero_grad(Optimizer& optimizer) {
    zero_grad_in_place(optimizer);
  }

 private:
  // An optimizer that already holds state on some rank gets rank 0's state on every rank.
  void share_optimizer_state(torch::optim::Optimizer& optimizer);

  runtime::ProcessGroup* group_ = nullptr;
  DdpOptions options_;
  bool fused_optimizer_ = true;  // Options::fused_optimizer
  std::vector<std::unique_ptr<detail::Reducer<Hook>>> reducers_;

 protected:
  Hook hook_{};
  std::string_view name_ = Ddp::name;  // the policy's full name, for errors: Fsdp<NoShard> too
};

#if defined(ACCEL_SEPARATE_COMPILATION)
extern template struct DdpStrategy<detail::AllreduceHook>;
extern template struct DdpStrategy<detail::CompressHook>;
#endif

template <>
struct Strategy<Ddp> : DdpStrategy<detail::AllreduceHook> {};

// Ddp with gradients cast to C's dtype for the wire, averaged, and cast back.
template <class Compression>
struct Strategy<DdpWith<Compression>> : DdpStrategy<detail::CompressHook> {
  Strategy() {
    hook_.wire = precision::to_scalar_type(Compression::wire);
    name_ = DdpWith<Compression>::name;
  }

  void attach(runtime::ProcessGroup* process_group, const Options& options) {
    // Refuse rather than quietly send fp32: the user asked for compression.
    if (process_group != nullptr && Compression::wire == policy::ComputeType::bfloat16 &&
        !accel::detail::gloo_has_bf16)
      accel::detail::fail("CompressBf16 needs bf16 all-reduce, which Gloo lacks on libtorch {}; use "
                   "DdpWith<CompressFp16> or Ddp",
                   TORCH_VERSION);
    DdpStrategy::attach(process_group, options);
  }
};

}  // namespace accel::parallel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/ddp.ipp"
#endif
