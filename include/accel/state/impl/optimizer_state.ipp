// Optimizer state: non-template helpers; optimizer_state.hpp includes it in header-only mode.
#pragma once

#include "../optimizer_state.hpp"

namespace accel::state {

ACCEL_DECL OptimizerKind kind_of(const torch::optim::Optimizer& optimizer) {
  OptimizerKind kind = OptimizerKind::other;
  accel::detail::for_each_optimizer_type([&](auto row) {
    using Type = typename accel::detail::OptimizerTypes<decltype(row)::value>::optimizer;
    if (kind == OptimizerKind::other && dynamic_cast<const Type*>(&optimizer) != nullptr)
      kind = decltype(row)::value;
  });
  return kind;
}

ACCEL_DECL std::string_view kind_name(OptimizerKind kind) {
  const auto* row = accel::detail::known_optimizer(kind);
  return row != nullptr ? row->type_name : "another optimizer type";
}

}  // namespace accel::state

namespace accel::state::detail {

ACCEL_DECL std::unique_ptr<torch::optim::OptimizerParamState> empty_state(OptimizerKind kind) {
  std::unique_ptr<torch::optim::OptimizerParamState> state;
  accel::detail::for_each_optimizer_type([&](auto row) {
    constexpr OptimizerKind of = decltype(row)::value;
    if (of == kind || (of == OptimizerKind::sgd && kind == OptimizerKind::sgd_momentum))
      state = std::make_unique<typename accel::detail::OptimizerTypes<of>::param_state>();
  });
  if (state == nullptr) accel::detail::fail("no parameter state type for another optimizer type");
  return state;
}

}  // namespace accel::state::detail

namespace accel::state {

ACCEL_DECL std::vector<std::pair<std::string, torch::Tensor>> param_state_tensors(
    OptimizerKind kind, const torch::optim::OptimizerParamState& state) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  auto& mutable_state = const_cast<torch::optim::OptimizerParamState&>(state);  // visit only reads
  detail::visit_state(
      kind, mutable_state,
      [&](std::string_view name, torch::Tensor& t) {
        if (t.defined()) named.emplace_back(std::string(name), t.detach().reshape({-1}));
      },
      [&](std::int64_t& step) { named.emplace_back("step", torch::scalar_tensor(step, torch::kInt64)); });
  return named;
}

ACCEL_DECL std::unique_ptr<torch::optim::OptimizerParamState> make_param_state(
    OptimizerKind kind, const std::map<std::string, torch::Tensor>& fields,
    torch::IntArrayRef shape, const torch::TensorOptions& options, const std::string& where) {
  auto state = detail::empty_state(kind);
  detail::visit_state(
      kind, *state,
      [&](std::string_view name, torch::Tensor& t) {
        const auto found = fields.find(std::string(name));
        if (found != fields.end()) t = found->second.reshape(shape).to(options).clone();
      },
      [&](std::int64_t& step) {
        const auto found = fields.find("step");
        if (found == fields.end())
          accel::detail::fail("{}: the {} state has no 'step'", where, kind_name(kind));
        step = found->second.item<std::int64_t>();
      });
  for (const auto& [name, tensor] : fields) {
    bool known = name == "step";
    detail::visit_state(
        kind, *state, [&](std::string_view field, torch::Tensor&) { known = known || name == field; },
        [](std::int64_t&) {});
    if (!known)
      accel::detail::fail("{}: '{}' is not part of the state of {}; was it saved by another "
                          "optimizer type?",
                          where, name, kind_name(kind));
  }
  return state;
}

ACCEL_DECL nlohmann::json options_json(OptimizerKind kind,
                                       const torch::optim::OptimizerOptions& options) {
  nlohmann::json json = nlohmann::json::object();
  auto copy = options.clone();  // visit_options takes a mutable reference
  detail::visit_options(kind, *copy, [&](const char* name, auto& value) { json[name] = value; });
  return json;
}

ACCEL_DECL std::unique_ptr<torch::optim::OptimizerOptions> options_from_json(
    OptimizerKind kind, const torch::optim::OptimizerOptions& options, const nlohmann::json& json,
    const std::string& where) {
  auto result = options.clone();
  detail::visit_options(kind, *result, [&](const char* name, auto& value) {
    using Value = std::remove_reference_t<decltype(value)>;
    const auto found = json.find(name);
    const bool typed = found != json.end() &&
                       (std::is_same_v<Value, bool> ? found->is_boolean() : found->is_number());
    if (!typed)
      accel::detail::fail("{}: option '{}' is missing or not a {} in the checkpoint ({})", where,
                          name, std::is_same_v<Value, bool> ? "boolean" : "number", json.dump());
    value = found->template get<Value>();
  });
  return result;
}

}  // namespace accel::state
