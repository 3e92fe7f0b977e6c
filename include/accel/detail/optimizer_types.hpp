// The torch types behind each row of detail/optimizer_table.hpp, and the one place that reads a
// row's state out of its torch::optim::OptimizerParamState: visit_state (the checkpoint's named
// state) and visit_any_state (memory_use's count) both go through OptimizerTypes<Kind>::tensors,
// whose count is checked against the row, so that a state tensor added to the table and not
// bound here (or the other way round) does not compile.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "error.hpp"
#include "optimizer_table.hpp"

namespace accel::detail {

// OptimizerTypes<Kind>: `optimizer`, `options`, `param_state`; tensors(state, f) returns
// f(torch::Tensor&...) called with the row's state tensors in its order; step(state) the step
// count's reference where the row has one.
template <OptimizerKind Kind>
struct OptimizerTypes;

template <>
struct OptimizerTypes<OptimizerKind::sgd> {
  using optimizer = torch::optim::SGD;
  using options = torch::optim::SGDOptions;
  using param_state = torch::optim::SGDParamState;
  template <class F>
  static decltype(auto) tensors(param_state& s, F&& f) {
    return f(s.momentum_buffer());
  }
};
template <>
struct OptimizerTypes<OptimizerKind::sgd_momentum> : OptimizerTypes<OptimizerKind::sgd> {};

// Adam's and AdamW's states: two types of the same fields.
template <class Optimizer, class Options, class State>
struct AdamTypes {
  using optimizer = Optimizer;
  using options = Options;
  using param_state = State;
  template <class F>
  static decltype(auto) tensors(param_state& s, F&& f) {
    return f(s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq());
  }
  static std::int64_t& step(param_state& s) { return s.step(); }
};
template <>
struct OptimizerTypes<OptimizerKind::adam>
    : AdamTypes<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState> {};
template <>
struct OptimizerTypes<OptimizerKind::adamw>
    : AdamTypes<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState> {};

template <>
struct OptimizerTypes<OptimizerKind::adagrad> {
  using optimizer = torch::optim::Adagrad;
  using options = torch::optim::AdagradOptions;
  using param_state = torch::optim::AdagradParamState;
  template <class F>
  static decltype(auto) tensors(param_state& s, F&& f) {
    return f(s.sum());
  }
  static std::int64_t& step(param_state& s) { return s.step(); }
};

template <>
struct OptimizerTypes<OptimizerKind::rmsprop> {
  using optimizer = torch::optim::RMSprop;
  using options = torch::optim::RMSpropOptions;
  using param_state = torch::optim::RMSpropParamState;
  template <class F>
  static decltype(auto) tensors(param_state& s, F&& f) {
    return f(s.square_avg(), s.momentum_buffer(), s.grad_avg());
  }
  static std::int64_t& step(param_state& s) { return s.step(); }
};

// The binding agrees with its row: as many tensors, and a step exactly where the row has one
// (counted in an unevaluated call: CountTensors is declared, never run).
struct CountTensors {
  template <class... Tensors>
  std::integral_constant<int, sizeof...(Tensors)> operator()(Tensors&... /*tensors*/) const;
};
template <OptimizerKind Kind>
consteval bool binds_row() {
  using T = OptimizerTypes<Kind>;
  using State = typename T::param_state;
  constexpr int tensors = decltype(T::tensors(std::declval<State&>(), CountTensors{}))::value;
  constexpr bool step = requires(State& s) { T::step(s); };
  return tensors == state_count(*known_optimizer(Kind)) &&
         step == known_optimizer(Kind)->has_step;
}

// Each distinct torch type once, in the table's order (sgd_momentum is SGD's type again).
template <class F>
constexpr void for_each_optimizer_type(F&& f) {
  f(std::integral_constant<OptimizerKind, OptimizerKind::sgd>{});
  f(std::integral_constant<OptimizerKind, OptimizerKind::adam>{});
  f(std::integral_constant<OptimizerKind, OptimizerKind::adamw>{});
  f(std::integral_constant<OptimizerKind, OptimizerKind::adagrad>{});
  f(std::integral_constant<OptimizerKind, OptimizerKind::rmsprop>{});
}

// The row of an optimizer type, exactly (a subclass may step or keep state differently): `other`
// for anything else.
template <class Optimizer>
inline constexpr OptimizerKind kind_of_type = [] {
  OptimizerKind kind = OptimizerKind::other;
  for_each_optimizer_type([&](auto k) {
    if (std::is_same_v<Optimizer, typename OptimizerTypes<decltype(k)::value>::optimizer>)
      kind = decltype(k)::value;
  });
  return kind;
}();

// f(std::string_view name, torch::Tensor&) for each of the row's state tensors,
// step(std::int64_t&) for its step count.
template <class Tensors, class Step>
void visit_state(OptimizerKind kind, torch::optim::OptimizerParamState& state, Tensors&& f,
                 Step&& step) {
  bool found = false;
  auto visit = [&](auto k) {
    constexpr OptimizerKind Kind = decltype(k)::value;
    using T = OptimizerTypes<Kind>;
    if (found || (kind != Kind && !(Kind == OptimizerKind::sgd && kind == OptimizerKind::sgd_momentum)))
      return;
    found = true;
    auto& s = static_cast<typename T::param_state&>(state);
    if constexpr (requires { T::step(s); }) step(T::step(s));
    T::tensors(s, [&](auto&... tensors) {
      std::size_t at = 0;
      (f(known_optimizer(Kind)->state[at++], tensors), ...);
    });
  };
  for_each_optimizer_type(visit);
  if (!found) fail("optimizer state of another optimizer type has no named tensors");
}

// f(const torch::Tensor&) for each state tensor of a parameter state of any row's type; false
// when it is of none.
template <class F>
bool visit_any_state(const torch::optim::OptimizerParamState& state, F&& f) {
  bool found = false;
  for_each_optimizer_type([&](auto k) {
    using T = OptimizerTypes<decltype(k)::value>;
    if (found) return;
    if (const auto* s = dynamic_cast<const typename T::param_state*>(&state)) {
      found = true;
      // tensors() takes the state as its accessors do; nothing here writes to it.
      T::tensors(const_cast<typename T::param_state&>(*s), [&](auto&... tensors) { (f(tensors), ...); });
    }
  });
  return found;
}

static_assert(binds_row<OptimizerKind::sgd>() && binds_row<OptimizerKind::sgd_momentum>() &&
              binds_row<OptimizerKind::adam>() && binds_row<OptimizerKind::adamw>() &&
              binds_row<OptimizerKind::adagrad>() && binds_row<OptimizerKind::rmsprop>());

}  // namespace accel::detail
