// torch::optim's optimizers as a checkpoint sees them: the per-parameter state as named tensors
// and the param groups' options as JSON, for the element-wise optimizers of the optimizer table
// (detail/optimizer_table.hpp: SGD, Adam, AdamW, Adagrad, RMSprop). Element-wise state ("exp_avg", "momentum_buffer", ...) is stored flattened,
// so that a piece of it belongs to a piece of its parameter: that is what lets a state saved by
// a sharded strategy load at another world size or under another strategy. "step" is a 0-dim
// int64 tensor. Any other optimizer (Ddp only: the sharded strategies refuse them at compile
// time) is saved whole through its own torch::serialize archive.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/optimizer_types.hpp"

namespace accel::state {

ACCEL_DECL OptimizerKind kind_of(const torch::optim::Optimizer& optimizer);

ACCEL_DECL std::string_view kind_name(OptimizerKind kind);

namespace detail {

// f(std::string_view name, torch::Tensor&) for each element-wise state tensor, step(int64_t&) for
// the step count: the names and tensors of the optimizer table (detail/optimizer_types.hpp).
using accel::detail::visit_state;

ACCEL_DECL std::unique_ptr<torch::optim::OptimizerParamState> empty_state(OptimizerKind kind);

// f(name, value&) for each option; value is double, bool or (Adam's betas) a pair of doubles.
template <class F>
void visit_options(OptimizerKind kind, torch::optim::OptimizerOptions& options, F&& f) {
  using namespace torch::optim;
  switch (kind) {
    case OptimizerKind::sgd:
    case OptimizerKind::sgd_momentum: {
      auto& o = static_cast<SGDOptions&>(options);
      f("lr", o.lr()), f("momentum", o.momentum()), f("dampening", o.dampening());
      f("weight_decay", o.weight_decay()), f("nesterov", o.nesterov());
      return;
    }
    case OptimizerKind::adam: {
      auto& o = static_cast<AdamOptions&>(options);
      f("lr", o.lr()), f("beta1", std::get<0>(o.betas())), f("beta2", std::get<1>(o.betas()));
      f("eps", o.eps()), f("weight_decay", o.weight_decay()), f("amsgrad", o.amsgrad());
      return;
    }
    case OptimizerKind::adamw: {
      auto& o = static_cast<AdamWOptions&>(options);
      f("lr", o.lr()), f("beta1", std::get<0>(o.betas())), f("beta2", std::get<1>(o.betas()));
      f("eps", o.eps()), f("weight_decay", o.weight_decay()), f("amsgrad", o.amsgrad());
      return;
    }
    case OptimizerKind::adagrad: {
      auto& o = static_cast<AdagradOptions&>(options);
      f("lr", o.lr()), f("lr_decay", o.lr_decay()), f("weight_decay", o.weight_decay());
      f("initial_accumulator_value", o.initial_accumulator_value()), f("eps", o.eps());
      return;
    }
    case OptimizerKind::rmsprop: {
      auto& o = static_cast<RMSpropOptions&>(options);
      f("lr", o.lr()), f("alpha", o.alpha()), f("eps", o.eps());
      f("weight_decay", o.weight_decay()), f("momentum", o.momentum());
      f("centered", o.centered());
      return;
    }
    case OptimizerKind::other: break;
  }
  // Another type: the learning rate is all a scheduler changes, and every options type has it.
  double lr = options.get_lr();
  f("lr", lr);
  options.set_lr(lr);
}

}  // namespace detail

// One parameter's state: the element-wise tensors flattened (defined ones only) and "step".
ACCEL_DECL std::vector<std::pair<std::string, torch::Tensor>> param_state_tensors(
    OptimizerKind kind, const torch::optim::OptimizerParamState& state);

// A new parameter state from named tensors (element-wise ones reshaped to `shape`, on `options`'
// device and dtype). `where` names the parameter in errors.
ACCEL_DECL std::unique_ptr<torch::optim::OptimizerParamState> make_param_state(
    OptimizerKind kind, const std::map<std::string, torch::Tensor>& fields,
    torch::IntArrayRef shape, const torch::TensorOptions& options, const std::string& where);

ACCEL_DECL nlohmann::json options_json(OptimizerKind kind,
                                       const torch::optim::OptimizerOptions& options);

// `options` with every option set from `json`, which must hold each of them with its type.
ACCEL_DECL std::unique_ptr<torch::optim::OptimizerOptions> options_from_json(
    OptimizerKind kind, const torch::optim::OptimizerOptions& options, const nlohmann::json& json,
    const std::string& where);

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/optimizer_state.ipp"
#endif
