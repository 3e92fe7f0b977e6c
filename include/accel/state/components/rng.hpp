// Checkpoint component: every rank's torch generator states (the CPU's, then each CUDA
// device's), in its own rank file. A load gives rank r saved rank r's states; at another world
// size the ranks beyond the saved ones keep theirs. The protocol: component.hpp.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "../../detail/separate_compilation.hpp"
#include "../manifest.hpp"
#include "component.hpp"

namespace accel::state::components {

namespace detail {
// This process's default generators: the CPU's, then one per CUDA device.
ACCEL_DECL std::vector<torch::Generator> generators();
}  // namespace detail

struct Rng {
  template <class View>
  static void add_tensors(const View&, int rank, NamedTensors& named) {
    const auto generators = detail::generators();
    for (std::size_t i = 0; i < generators.size(); ++i)
      named.emplace_back(rng_tensor_name(rank, i), generators[i].get_state());
  }

  template <class View>
  static void describe(const View&, Manifest&) {}

  template <class View>
  static void check(const View&, const Manifest&, const std::string&) {}

  template <class View>
  static void stage(const Staging<View>& s) {
    if (s.rank >= s.manifest.world_size) return;
    const auto generators = detail::generators();
    for (std::size_t i = 0; i < generators.size(); ++i) {
      const std::string name = rng_tensor_name(s.rank, i);
      if (!s.catalog.has(name)) continue;
      torch::Tensor value = s.catalog.whole(name);
      s.apply.push_back([generator = generators[i], value]() mutable {
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_state(value);
      });
    }
  }
};

}  // namespace accel::state::components

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/rng.ipp"
#endif
