// The optimizers accel knows, in one table: torch::optim's element-wise optimizers, each with the
// per-parameter state it keeps. Everything in accel that looks at an optimizer's kind reads this
// table and nothing else: which optimizers a sharded strategy may rebuild over a shard
// (parallel/detail/shardable_optimizer.hpp), the checkpoint's named state
// (state/optimizer_state.hpp), Accelerator::memory_use's count (detail/memory_counter.hpp), the memory
// estimate (memory/memory_formulas.hpp) and the fused step (parallel/fused_step.hpp). The torch
// types of each row are bound in detail/optimizer_types.hpp, which checks that it binds every
// row and visits exactly the row's state.
//
// `sgd_momentum` is a torch::optim::SGD with momentum: an estimate has no optimizer object to
// look at, while a checkpoint sees the type (kind_of() says `sgd` for every SGD, and its state
// has a momentum buffer or not). `other`: any other optimizer, which a checkpoint saves whole and
// an estimate cannot name.
//
// No torch and no {fmt} here: accel-launch estimate-memory reads it too.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace accel {

enum class OptimizerKind { sgd, sgd_momentum, adam, adamw, adagrad, rmsprop, other };

namespace detail {

struct KnownOptimizer {
  OptimizerKind kind;
  std::string_view type_name;  // in messages and the checkpoint's manifest
  std::string_view cli_name;   // accel-launch estimate-memory --optimizer
  // The element-wise state of a parameter, in the order a checkpoint lists it ("" past the end,
  // written out: GCC 12 cannot read an element left to aggregate initialization in a constant).
  std::array<std::string_view, 3> state;
  // Of those, the tensors an estimate counts with the default options (Adam's max_exp_avg_sq is
  // amsgrad's, RMSprop's momentum_buffer and grad_avg are momentum's and centered's).
  int estimated_state;
  bool has_step;  // a "step" count beside the tensors
  bool fused;     // parallel/fused_step.hpp steps it in one pass (the exact type only)
};

inline constexpr std::array<KnownOptimizer, 6> known_optimizers{{
    {OptimizerKind::sgd, "torch::optim::SGD", "sgd", {"momentum_buffer", "", ""}, 0, false, true},
    {OptimizerKind::sgd_momentum, "torch::optim::SGD", "sgd-momentum", {"momentum_buffer", "", ""}, 1,
     false, true},
    {OptimizerKind::adam, "torch::optim::Adam", "adam", {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
     2, true, true},
    {OptimizerKind::adamw, "torch::optim::AdamW", "adamw",
     {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, 2, true, true},
    {OptimizerKind::adagrad, "torch::optim::Adagrad", "adagrad", {"sum", "", ""}, 1, true, false},
    {OptimizerKind::rmsprop, "torch::optim::RMSprop", "rmsprop",
     {"square_avg", "momentum_buffer", "grad_avg"}, 1, true, false},
}};

// The row of `kind`; null for `other`.
inline constexpr const KnownOptimizer* known_optimizer(OptimizerKind kind) {
  for (const auto& row : known_optimizers)
    if (row.kind == kind) return &row;
  return nullptr;
}

// How many of the row's state tensors there are.
inline constexpr int state_count(const KnownOptimizer& row) {
  int n = 0;
  for (const auto name : row.state) n += name.empty() ? 0 : 1;
  return n;
}

}  // namespace detail

// The names accel-launch estimate-memory's --optimizer takes (and sgd_momentum).
inline constexpr std::optional<OptimizerKind> optimizer_kind(std::string_view name) {
  if (name == "sgd_momentum") return OptimizerKind::sgd_momentum;
  for (const auto& row : detail::known_optimizers)
    if (row.cli_name == name) return row.kind;
  return std::nullopt;
}

}  // namespace accel
