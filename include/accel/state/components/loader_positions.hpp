// Checkpoint component: where each prepared loader stands (../loader_position.hpp), in the
// manifest: the epoch to resume in, the batches of it served (on this rank and over all), and
// what identifies its data. A load checks that the data is the same and that the batches served
// split evenly over the processes resuming, and sets each loader to pass over them. The
// protocol: component.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "../../detail/error.hpp"
#include "../manifest.hpp"
#include "component.hpp"

namespace accel::state::components {

struct LoaderPositions {
  template <class View>
  static void add_tensors(const View&, int, NamedTensors&) {}

  template <class View>
  static void describe(const View& view, Manifest& manifest) {
    for (const auto& position : view.loaders) {
      // An epoch served to its end resumes at the next one; before any iteration (since a
      // load), the position still to be skipped to.
      std::int64_t epoch = position.next_epoch(), consumed = position.skip;
      if (position.epoch >= 0) {
        consumed = position.consumed < position.batches ? position.consumed : 0;
        if (consumed > 0) epoch = position.epoch;
      }
      const std::int64_t global =
          view.options.split_batches ? consumed : consumed * view.world_size;
      manifest.loaders.push_back({epoch, consumed, global, position.samples, position.batch_size,
                                  position.shuffle, position.seed});
    }
  }

  template <class View>
  static void check(const View&, const Manifest&, const std::string&) {}

  // Load: the same data, and where to continue in it.
  template <class View>
  static void stage(const Staging<View>& s) {
    const int saved_world = s.manifest.world_size;
    const auto& loaders = s.manifest.loaders;
    if (loaders.size() != s.view.loaders.size())
      accel::detail::fail("load_state: '{}' holds {} data loader positions, {} loaders are "
                          "prepared",
                          s.where, loaders.size(), s.view.loaders.size());
    for (std::size_t l = 0; l < s.view.loaders.size(); ++l) {
      const auto& saved = loaders[l];
      auto& position = s.view.loaders[l];
      if (saved.samples != position.samples || saved.batch_size != position.batch_size ||
          saved.shuffle != position.shuffle || saved.seed != position.seed)
        accel::detail::fail("load_state: loader #{} was saved over {} samples in batches of {} "
                            "(shuffle {}, seed {}), the prepared one serves {} in batches of {} "
                            "(shuffle {}, seed {}); a resume continues the same data",
                            l, saved.samples, saved.batch_size, saved.shuffle, saved.seed,
                            position.samples, position.batch_size, position.shuffle,
                            position.seed);
      const std::int64_t epoch = saved.epoch, global = saved.global_batches_consumed;
      const int world = s.view.world_size;
      const std::int64_t per_rank = s.view.options.split_batches ? 1 : world;
      if (global % per_rank != 0)
        accel::detail::fail("load_state: loader #{} was saved {} batches into epoch {}, which {} "
                            "processes cannot split evenly; resume on {} processes, or from a "
                            "checkpoint at the end of an epoch",
                            l, global, epoch, world, saved_world);
      s.apply.push_back([&position, epoch, skip = global / per_rank] {
        position.set_epoch(epoch);
        position.skip = skip;
        position.epoch = -1;
        position.consumed = 0;
      });
    }
  }
};

}  // namespace accel::state::components
