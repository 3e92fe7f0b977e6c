// Checkpoint component: the rest of the training state. The precision's own state in the
// manifest (precision/contract.hpp: its to_json / from_json; {} for a precision with nothing to
// save), the steps completed, and the objects of register_for_checkpointing() (../custom_objects.hpp)
// in rank 0's file, with their count in the manifest. The protocol: component.hpp.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "../../detail/error.hpp"
#include "../manifest.hpp"
#include "component.hpp"

namespace accel::state::components {

struct PrecisionAndObjects {
  template <class View>
  static void add_tensors(const View& view, int rank, NamedTensors& named) {
    if (rank != 0) return;
    for (std::size_t i = 0; i < view.custom_objects.size(); ++i)
      named.emplace_back(custom_object_name(i),
                         detail::bytes_tensor(view.custom_objects[i].save()));
  }

  template <class View>
  static void describe(const View& view, Manifest& manifest) {
    manifest.completed_steps = view.completed_steps;
    view.describe_precision(manifest);
    manifest.custom_objects = view.custom_objects.size();
  }

  // The precision's state does not carry over between precisions.
  template <class View>
  static void check(const View& view, const Manifest& manifest, const std::string& where) {
    const std::string_view here = view.policies.precision;
    if (manifest.precision != here && !manifest.precision_state.empty())
      accel::detail::fail("load_state: '{}' was saved under {} and this Accelerator is {}; the "
                          "precision's state (Fp16's loss scale, Fp8's scales) does not carry "
                          "over between them, so load it with {}",
                          where, manifest.precision, here, manifest.precision);
  }

  // Load: the precision's state, read by its own from_json and checked by it (a checkpoint of a
  // precision with nothing to save leaves this one's as it was constructed); then the step
  // count and the registered objects.
  template <class View>
  static void stage(const Staging<View>& s) {
    if (!s.manifest.precision_state.empty())
      s.view.stage_precision(s.manifest, s.apply);
    s.apply.push_back(
        [&steps = s.view.completed_steps, saved = s.manifest.completed_steps] { steps = saved; });
    const std::size_t custom = s.manifest.custom_objects;
    if (custom != s.view.custom_objects.size())
      accel::detail::fail("load_state: '{}' holds {} registered objects, {} are registered; "
                          "register_for_checkpointing() the same objects, in the same order",
                          s.where, custom, s.view.custom_objects.size());
    for (std::size_t i = 0; i < custom; ++i)
      s.apply.push_back(s.view.custom_objects[i].stage(
          detail::tensor_bytes(s.catalog.whole(custom_object_name(i))),
          fmt::format("registered object #{} in '{}'", i, s.folder.string())));
  }
};

}  // namespace accel::state::components
