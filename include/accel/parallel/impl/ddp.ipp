// DdpStrategy's members that do not depend on the optimizer's type (ddp.hpp includes this file in
// header-only mode). With ACCEL_SEPARATE_COMPILATION, accel's separately compiled part
// instantiates them here for both hooks, once, and ddp.hpp declares those instantiations extern.
#pragma once

#include <sstream>

#include "../ddp.hpp"

namespace accel::parallel {

template <class Hook>
void DdpStrategy<Hook>::attach(runtime::ProcessGroup* process_group, const Options& options) {
  // Refused rather than ignored: the user asked for less traffic.
  if (options.sharded_communication.any())
    accel::detail::fail("{}: Options::sharded_communication sets what the sharded strategies "
                        "all-gather and reduce-scatter, and {} does neither; for {}'s gradients "
                        "in bf16 or fp16 use the policy DdpWith<CompressBf16> or "
                        "DdpWith<CompressFp16>, or leave sharded_communication unset",
                        name_, name_, name_);
  group_ = process_group;
  options_ = options.ddp;
  fused_optimizer_ = options.fused_optimizer;
}

template <class Hook>
void DdpStrategy<Hook>::prepare_model(torch::nn::Module& module, const std::string& label) {
  if (group_ == nullptr) return;
  torch::NoGradGuard no_grad;
  detail::broadcast_from_root(*group_, module.parameters());
  detail::broadcast_from_root(*group_, module.buffers());
  std::vector<std::string> names;
  std::vector<torch::Tensor> parameters;
  for (const auto& item : module.named_parameters()) {
    names.push_back(item.key());
    parameters.push_back(item.value());
  }
  reducers_.push_back(std::make_unique<detail::Reducer<Hook>>(
      name_, *group_, label, std::move(names), std::move(parameters), options_, hook_));
}

template <class Hook>
void DdpStrategy<Hook>::share_optimizer_state(torch::optim::Optimizer& optimizer) {
  if (group_ == nullptr) return;
  if (!runtime::any_rank(group_, !optimizer.state().empty())) return;
  std::string bytes;
  if (group_->rank() == 0) {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  bytes = group_->broadcast_bytes(bytes, 0);
  if (group_->rank() == 0) return;
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  optimizer.load(archive);
}

template <class Hook>
void DdpStrategy<Hook>::before_forward(torch::nn::Module& module) {
  if (group_ == nullptr || !options_.broadcast_buffers) return;
  torch::NoGradGuard no_grad;
  detail::broadcast_from_root(*group_, module.buffers());
}

template <class Hook>
void DdpStrategy<Hook>::before_backward(bool sync) {
  for (auto& reducer : reducers_) reducer->prepare_for_backward(sync);
}

template <class Hook>
void DdpStrategy<Hook>::after_backward(bool /*sync*/) {
  for (auto& reducer : reducers_) reducer->finalize();
}

#if defined(ACCEL_SEPARATE_COMPILATION)
template struct DdpStrategy<detail::AllreduceHook>;
template struct DdpStrategy<detail::CompressHook>;
#endif

}  // namespace accel::parallel
