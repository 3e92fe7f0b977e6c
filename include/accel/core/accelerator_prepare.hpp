// The Accelerator's setting up, its members defined here rather than in the class
// (accelerator_class.hpp, which includes this file at its end): the constructor (the policies
// attached, the options they refuse), and the prepare path, what prepare() does with each object
// it is given (a module registered, materialized and wrapped by the precision and the strategy;
// an optimizer, a scheduler or a loader recorded), with the refusal of automatic checkpoints
// under tensor parallelism, checked before the core is made.
#pragma once

#include <fmt/format.h>

#include "../accelerator_class.hpp"
#include "../data/shard.hpp"
#include "../detail/deferred_build.hpp"
#include "../runtime/cpu_heap.hpp"
#include "../runtime/same_model.hpp"
#include "../state/automatic_checkpoints.hpp"

namespace accel {

template <class Par, class Prec, class Acc>
Accelerator<Par, Prec, Acc>::Accelerator(Options options)
    : AcceleratorCore(std::move(options),
                      accumulation_steps, shards_parameters_v<parallelism_policy>) {
  if (options_.offload.any() && !parallel::Strategy<parallelism_policy>::can_offload)
    detail::fail("{}: Options::offload moves optimizer state (and Zero3's parameter shards) to "
                 "the CPU, and {} keeps them whole on every rank's device; use Zero2, Zero3 or "
                 "Fsdp<FullShard|ShardGradOp|HybridShard> to offload, or leave Options::offload "
                 "off",
                 parallelism_policy::name, parallelism_policy::name);
  state::check_automatic_checkpoint_options(options_.checkpoints);
  precision_.attach(group_.get(), options_, device_);
  strategy_.attach(group_.get(), options_);
  if (options_.seed) set_seed(*options_.seed);
}

template <class Par, class Prec, class Acc>
template <class T>
auto Accelerator<Par, Prec, Acc>::prepare_one(T&& object) {
  using Object = std::remove_cvref_t<T>;
  if constexpr (detail::is_prepared<Object>) {
    return Object(object);
  } else if constexpr (detail::ModuleHandle<Object>) {
    register_model(detail::module_pointer(object));
    return PreparedModel<Accelerator, Object>(this, object);
  } else if constexpr (std::derived_from<Object, torch::optim::Optimizer>) {
    static_assert(std::is_lvalue_reference_v<T>,
                  "accel: prepare() keeps a pointer to the optimizer; pass a named optimizer "
                  "that outlives the Accelerator, not a temporary");
    strategy_.prepare_optimizer(object);
    if (std::find(optimizers_.begin(), optimizers_.end(), &object) == optimizers_.end())
      optimizers_.push_back(&object);
    return PreparedOptimizer<Accelerator, Object>(this, &object);
  } else if constexpr (detail::LrScheduler<Object>) {
    static_assert(std::is_lvalue_reference_v<T>,
                  "accel: prepare() keeps a pointer to the scheduler; pass a named scheduler "
                  "that outlives the Accelerator, not a temporary");
    if (std::find(schedulers_.begin(), schedulers_.end(), &object) == schedulers_.end())
      schedulers_.push_back(&object);
    return PreparedScheduler<Accelerator, Object>(this, &object);
  } else if constexpr (detail::is_data_loader<Object>) {
    static_assert(std::is_lvalue_reference_v<T>,
                  "accel: prepare() keeps a pointer to the DataLoader; pass a named loader "
                  "that outlives the Accelerator, not a temporary");
    // The loaders' protocol is the core's: one PreparedLoader per loader type, whatever the
    // policies.
    return PreparedLoader<detail::AcceleratorCore, Object>(
        this, &object, register_loader(object),
        data::Shard{data_rank(), data_ranks(), options_.even_batches, options_.split_batches});
  } else if constexpr (detail::is_streaming_loader<Object>) {
    static_assert(std::is_lvalue_reference_v<T>,
                  "accel: prepare() keeps a pointer to the StreamingLoader; pass a named loader "
                  "that outlives the Accelerator, not a temporary");
    return PreparedStreamingLoader<detail::AcceleratorCore, Object>(
        this, &object, register_loader(object), data_rank(), data_ranks(),
        options_.split_batches);
  } else {
    static_assert(detail::dependent_false<Object>,
                  "accel: prepare() takes modules (torch::nn::ModuleHolder or "
                  "std::shared_ptr<Module>), torch::optim optimizers, torch::optim::LRScheduler "
                  "schedulers, accel::DataLoader and accel::StreamingLoader; this argument is "
                  "none of them");
  }
}

template <class Par, class Prec, class Acc>
void Accelerator<Par, Prec, Acc>::register_model(const std::shared_ptr<torch::nn::Module>& module) {
  for (const auto& known : models_)
    if (known.get() == module.get()) return;
  const std::string label =
      fmt::format("prepared model #{} ({})", models_.size() + 1, module->name());
  // An empty build's tensors refuse operators outside prepare() (detail/unprepared_mark.hpp).
  const detail::UnpreparedAccess preparing;
  runtime::check_same_model_on_every_rank(group_.get(), *module, label);
  // An empty build (accel::deferred_init): replayed from rank 0's generator state, so every
  // rank has what an eager build broadcast from rank 0 has. A strategy that says
  // deferred_models (parallel/contract.hpp) materializes only this rank's shard; the others
  // (and one process) the whole model.
  if (const auto build = detail::deferred_build_of(*module)) {
    torch::Tensor state = build->generator_state().clone();
    if (group_ != nullptr) group_->broadcast(state);
    if constexpr (parallel::builds_deferred_models<parallel::Strategy<parallelism_policy>>) {
      if (group_ != nullptr) {
        precision_.prepare_model(module, label);
        if (options_.activation_checkpointing != nullptr) options_.activation_checkpointing(module);
        strategy_.prepare_deferred_model(*module, label, device_, *build, state);
        detail::forget_deferred_build(*module);
        if (options_.tune_cpu_heap && device_.is_cpu()) runtime::release_freed_cpu_memory();
        models_.push_back(module);
        return;
      }
    }
    detail::materialize_whole(*module, *build, state, device_);
  }
  module->to(device_);
  // Innermost first: a Sequential child's call goes through the strategy's unit, then the
  // activation checkpoint, then the precision's layer (Fp8's Linear).
  precision_.prepare_model(module, label);
  if (options_.activation_checkpointing != nullptr) options_.activation_checkpointing(module);
  strategy_.prepare_model(*module, label);
  if (options_.tune_cpu_heap && device_.is_cpu()) runtime::release_freed_cpu_memory();
  models_.push_back(module);
}

}  // namespace accel
