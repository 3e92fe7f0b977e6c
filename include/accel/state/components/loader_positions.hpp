// Checkpoint component: where each prepared loader stands (../loader_position.hpp), in the
// manifest: the epoch to resume in, the batches of it served (on this rank and over all), and
// what identifies its data. A load checks that the data is the same and that the batches served
// split evenly over the processes resuming, and sets each loader to pass over them. A streaming
// loader's position is its own and per rank (data/stream_position.hpp): an int64 tensor in each
// rank's file, read back by the same rank of a run of the same world size. The protocol:
// component.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "../../detail/error.hpp"
#include "../loader_position.hpp"
#include "../manifest.hpp"
#include "component.hpp"

namespace accel::state::components {

struct LoaderPositions {
  // The ranks batches are dealt to: every rank, or under tensor parallelism each group of
  // tensor-parallel ranks once (they share a batch).
  template <class View>
  static int data_ranks(const View& view) {
    return view.world_size / view.policies.tensor_parallel;
  }

  static std::string stream_tensor_name(std::size_t loader, int rank) {
    return fmt::format("loader{}/stream/rank{}", loader, rank);
  }

  template <class View>
  static void add_tensors(const View& view, int rank, NamedTensors& named) {
    for (std::size_t l = 0; l < view.loaders.size(); ++l) {
      const auto& position = view.loaders[l];
      if (!position.stream_position) continue;
      const std::vector<std::int64_t> numbers = position.stream_position();
      named.emplace_back(stream_tensor_name(l, rank),
                         torch::tensor(numbers, torch::kInt64).clone());
    }
  }

  template <class View>
  static void describe(const View& view, Manifest& manifest) {
    for (const auto& position : view.loaders) {
      if (position.stream_position) {  // the epoch and the batches served of it, on rank 0
        const std::vector<std::int64_t> numbers = position.stream_position();
        const std::int64_t epoch = numbers.at(4), served = numbers.at(7);
        manifest.loaders.push_back({epoch, served, served * data_ranks(view), position.samples,
                                    position.batch_size, position.shuffle, position.seed});
        continue;
      }
      // An epoch served to its end resumes at the next one; before any iteration (since a
      // load), the position still to be skipped to.
      std::int64_t epoch = position.next_epoch(), consumed = position.skip;
      if (position.epoch >= 0) {
        consumed = position.consumed < position.batches ? position.consumed : 0;
        if (consumed > 0) epoch = position.epoch;
      }
      const std::int64_t global =
          view.options.split_batches ? consumed : consumed * data_ranks(view);
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
      if ((saved.samples == streaming_samples) != static_cast<bool>(position.stage_stream))
        accel::detail::fail("load_state: loader #{} was saved as a {}, the prepared one is a {}; "
                            "prepare the same kinds of loaders, in the same order",
                            l,
                            saved.samples == streaming_samples ? "StreamingLoader" : "DataLoader",
                            position.stage_stream ? "StreamingLoader" : "DataLoader");
      if (position.stage_stream) {
        stage_stream(s, l, saved, position);
        continue;
      }
      if (saved.samples != position.samples || saved.batch_size != position.batch_size ||
          saved.shuffle != position.shuffle || saved.seed != position.seed)
        accel::detail::fail("load_state: loader #{} was saved over {} samples in batches of {} "
                            "(shuffle {}, seed {}), the prepared one serves {} in batches of {} "
                            "(shuffle {}, seed {}); a resume continues the same data",
                            l, saved.samples, saved.batch_size, saved.shuffle, saved.seed,
                            position.samples, position.batch_size, position.shuffle,
                            position.seed);
      const std::int64_t epoch = saved.epoch, global = saved.global_batches_consumed;
      const int world = data_ranks(s.view);
      const std::int64_t per_rank = s.view.options.split_batches ? 1 : world;
      const int saved_data_ranks = saved_world / s.manifest.tensor_parallel;
      if (global % per_rank != 0)
        accel::detail::fail("load_state: loader #{} was saved {} batches into epoch {}, which {} "
                            "data-parallel ranks cannot split evenly; resume with {} data-parallel "
                            "ranks (it was saved on {} x tensor-parallel {}, this run is {} x "
                            "{}), or from a checkpoint at the end of an epoch",
                            l, global, epoch, world, saved_data_ranks, saved_data_ranks,
                            s.manifest.tensor_parallel, world, s.view.policies.tensor_parallel);
      s.apply.push_back([&position, epoch, skip = global / per_rank] {
        position.set_epoch(epoch);
        position.skip = skip;
        position.epoch = -1;
        position.consumed = 0;
      });
    }
  }

 private:
  // A streaming loader: the same options, the same world size (each rank reads its own shards),
  // and this rank's saved position, checked by the loader.
  template <class View>
  static void stage_stream(const Staging<View>& s, std::size_t l, const LoaderRecord& saved,
                           LoaderPosition& position) {
    if (saved.batch_size != position.batch_size || saved.shuffle != position.shuffle ||
        saved.seed != position.seed)
      accel::detail::fail("load_state: streaming loader #{} was saved with batches of {} "
                          "(shuffle {}, seed {}), the prepared one makes batches of {} (shuffle "
                          "{}, seed {}); a resume continues the same stream",
                          l, saved.batch_size, saved.shuffle, saved.seed, position.batch_size,
                          position.shuffle, position.seed);
    if (s.manifest.world_size != s.view.world_size)
      accel::detail::fail("load_state: streaming loader #{} in '{}' was saved by {} processes; "
                          "this run has {}. Each process reads its own shards, so a stream "
                          "resumes exactly only at the world size it was saved at: resume on {} "
                          "processes",
                          l, s.where, s.manifest.world_size, s.view.world_size,
                          s.manifest.world_size);
    const std::string name = stream_tensor_name(l, s.rank);
    if (!s.catalog.has(name))
      accel::detail::fail("load_state: '{}' lists streaming loader #{}, but its rank files hold "
                          "no '{}'; the checkpoint is incomplete",
                          s.where, l, name);
    const torch::Tensor numbers = s.catalog.whole(name).to(torch::kInt64).contiguous();
    const std::vector<std::int64_t> saved_position(
        numbers.data_ptr<std::int64_t>(), numbers.data_ptr<std::int64_t>() + numbers.numel());
    s.apply.push_back(position.stage_stream(saved_position, s.where));
  }
};

}  // namespace accel::state::components
