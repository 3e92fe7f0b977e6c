// Every rank must prepare the same model (checked by prepare(), on every transport). A parameter
// one rank froze or shaped differently would give the ranks different buckets and shards: over
// Gloo the collectives would then run on tensors of different sizes, with no error or a crash.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <vector>

#include "../detail/error.hpp"
#include "collectives.hpp"
#include "process_group.hpp"

namespace accel::runtime {

namespace detail {
// One line per parameter and buffer, each ending with '\n': kind, name, dtype, shape, and
// whether it is frozen.
inline std::string model_layout(const torch::nn::Module& module) {
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

inline std::vector<std::string> lines_of(const std::string& layout) {
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < layout.size();) {
    const std::size_t end = layout.find('\n', at);
    lines.push_back(layout.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}
}  // namespace detail

// Refuses, on every rank alike, a model whose layout differs from rank 0's, naming the first
// line that differs. Nothing to check without a group (one process).
inline void check_same_model_on_every_rank(ProcessGroup* group, const torch::nn::Module& module,
                                           const std::string& label) {
  if (group == nullptr) return;
  const auto layouts = gather_object(group, detail::model_layout(module));
  for (std::size_t r = 1; r < layouts.size(); ++r) {
    if (layouts[r] == layouts[0]) continue;
    const auto first = detail::lines_of(layouts[0]), other = detail::lines_of(layouts[r]);
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
