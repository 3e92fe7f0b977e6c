// The same-model check; same_model.hpp includes it in header-only mode.
#pragma once

#include "../same_model.hpp"

namespace accel::runtime::model_layout_text {

ACCEL_DECL std::string model_layout(const torch::nn::Module& module) {
  std::string layout;
  auto describe = [&layout](const char* kind, const std::string& name, const torch::Tensor& t) {
    std::string shape;
    for (const auto size : t.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(size);
    layout += fmt::format("{} '{}' {} [{}]{}\n", kind, name, c10::toString(t.scalar_type()), shape,
                          t.requires_grad() ? "" : " (no gradient)");
  };
  for (const auto& item : module.named_parameters()) describe("parameter", item.key(), item.value());
  for (const auto& item : module.named_buffers()) describe("buffer", item.key(), item.value());
  return layout;
}

ACCEL_DECL std::vector<std::string> lines_of(const std::string& layout) {
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < layout.size();) {
    const std::size_t end = layout.find('\n', at);
    lines.push_back(layout.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

}  // namespace accel::runtime::model_layout_text

namespace accel::runtime {

ACCEL_DECL void check_same_model_on_every_rank(ProcessGroup* group, const torch::nn::Module& module,
                                               const std::string& label) {
  if (group == nullptr) return;
  const auto layouts = gather_object(group, model_layout_text::model_layout(module));
  for (std::size_t r = 1; r < layouts.size(); ++r) {
    if (layouts[r] == layouts[0]) continue;
    const auto first = model_layout_text::lines_of(layouts[0]);
    const auto other = model_layout_text::lines_of(layouts[r]);
    std::size_t i = 0;
    while (i < first.size() && i < other.size() && first[i] == other[i]) ++i;
    accel::detail::fail("{}: rank {} and rank 0 prepared different models: rank 0 has {}, rank {} "
                        "has {}; every rank must build the same model, with the same parameters "
                        "frozen, before prepare()",
                        label, r, i < first.size() ? first[i] : "nothing more", r,
                        i < other.size() ? other[i] : "nothing more");
  }
}

}  // namespace accel::runtime
