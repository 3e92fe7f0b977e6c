// Checkpoint component: the accumulation window (detail/gradient_state.hpp) in the manifest, and
// mid-window the gradients each rank has collected so far in its rank file: a parameter's .grad
// under its model tensor name, or a sharded strategy's flat gradients as "flat<f>". Those
// belong to the layout that collected them, so a mid-window checkpoint loads only under the same
// strategy, world size and GradAccum. The protocol: component.hpp.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <vector>

#include "../../detail/error.hpp"
#include "../checkpoint_view.hpp"
#include "../manifest.hpp"
#include "component.hpp"

namespace accel::state::components {

struct Window {
  template <class View>
  static void add_tensors(const View& view, int rank, NamedTensors& named) {
    if (!view.window.collecting()) return;
    for (std::size_t m = 0; m < view.models.size(); ++m)
      for (const auto& item : view.models[m]->named_parameters())
        if (!view.strategy.is_flattened(item.value()) && item.value().grad().defined())
          named.emplace_back(gradient_tensor_name(rank, model_tensor_name(m, item.key())),
                             detail::cpu_copy(item.value().grad()));
    const auto flats = view.strategy.flat_gradients();
    for (std::size_t f = 0; f < flats.size(); ++f)
      if (flats[f].defined())
        named.emplace_back(gradient_tensor_name(rank, fmt::format("flat{}", f)),
                           detail::cpu_copy(flats[f]));
  }

  template <class View>
  static void describe(const View& view, Manifest& manifest) {
    const auto window = view.window.saved();
    manifest.window = {window.window, window.position, window.collecting};
  }

  // A mid-window checkpoint's gradients belong to the layout that collected them.
  template <class View>
  static void check(const View& view, const Manifest& manifest, const std::string& where) {
    const CheckpointPolicies& here = view.policies;
    const WindowRecord& window = manifest.window;
    const int saved_world = manifest.world_size;
    if (window.collecting &&
        (saved_world != view.world_size || manifest.parallelism != here.parallelism ||
         manifest.accumulation_steps != here.accumulation_steps))
      accel::detail::fail("load_state: '{}' was saved mid-window (micro-step {} of {}) by {} on {} "
                          "processes with GradAccum<{}>; its collected gradients belong to that "
                          "layout, so load it with the same, not {} on {} processes with "
                          "GradAccum<{}> (or save at the end of a window, when sync_gradients() "
                          "is true)",
                          where, window.position, window.length, manifest.parallelism, saved_world,
                          manifest.accumulation_steps, here.parallelism, view.world_size,
                          here.accumulation_steps);
  }

  // Load: the window, and mid-window the gradients collected so far.
  template <class View>
  static void stage(const Staging<View>& s) {
    auto& strategy = s.view.strategy;
    const WindowRecord& window = s.manifest.window;
    s.apply.push_back([&state = s.view.window, window] {
      state.restore({window.length, window.position, window.collecting});
    });
    if (!window.collecting) return;
    for (std::size_t m = 0; m < s.view.models.size(); ++m)
      for (const auto& item : s.view.models[m]->named_parameters()) {
        const std::string name = gradient_tensor_name(s.rank, model_tensor_name(m, item.key()));
        if (strategy.is_flattened(item.value()) || !s.catalog.has(name)) continue;
        torch::Tensor value = s.catalog.whole(name);
        s.apply.push_back([p = item.value(), value]() mutable {
          if (p.grad().defined())
            p.mutable_grad().copy_(value);
          else
            p.mutable_grad() = value.to(p.device()).clone();
        });
      }
    const auto flats = strategy.flat_gradients();
    std::vector<torch::Tensor> gradients(flats.size());
    for (std::size_t f = 0; f < flats.size(); ++f) {
      const std::string name = gradient_tensor_name(s.rank, fmt::format("flat{}", f));
      if (s.catalog.has(name)) gradients[f] = s.catalog.whole(name);
    }
    s.apply.push_back([&strategy, gradients] { strategy.restore_flat_gradients(gradients); });
  }
};

}  // namespace accel::state::components
