// Which of torch::optim's element-wise optimizers a user's optimizer is, the one name both of
// accel's views of an optimizer use: a checkpoint reads and writes its state's fields and options
// by kind (state/optimizer_state.hpp), and a memory estimate counts the state tensors it keeps
// of each parameter's size (memory/memory_formulas.hpp). `sgd_momentum` is a torch::optim::SGD
// with momentum: an estimate has no optimizer object to look at, while a checkpoint sees the
// type (state::kind_of() says `sgd` for every SGD, and its state has a momentum buffer or not).
// `other`: any other optimizer, which a checkpoint saves whole and an estimate cannot name.
//
// No torch and no {fmt} here: accel-launch estimate-memory uses it too.
#pragma once

#include <optional>
#include <string_view>

namespace accel {

enum class OptimizerKind { sgd, sgd_momentum, adam, adamw, adagrad, rmsprop, other };

// The names accel-launch estimate-memory's --optimizer takes.
inline constexpr std::optional<OptimizerKind> optimizer_kind(std::string_view name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "sgd-momentum" || name == "sgd_momentum") return OptimizerKind::sgd_momentum;
  if (name == "adam") return OptimizerKind::adam;
  if (name == "adamw") return OptimizerKind::adamw;
  if (name == "adagrad") return OptimizerKind::adagrad;
  if (name == "rmsprop") return OptimizerKind::rmsprop;
  return std::nullopt;
}

}  // namespace accel
