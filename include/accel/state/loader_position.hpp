// Where a prepared loader stands, as the Accelerator records it for checkpoints: the epoch under
// way and how many of this rank's batches of it were served. A resumed run sets the loader's
// epoch and passes over those batches, so that it continues with exactly the next batch. What
// identifies the data (samples, batch size, shuffle and seed) is kept too: a checkpoint taken over
// other data cannot resume exactly, and says so. A streaming loader (data/stream_loader.hpp)
// keeps its own position instead, per rank: `samples` is then -1, and the two functions below
// reach it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace accel::state {

struct LoaderPosition {
  const void* identity = nullptr;  // the user's DataLoader
  std::int64_t epoch = -1;         // the epoch the last iteration began; -1: none began
  std::int64_t consumed = 0;       // this rank's batches of it served
  std::int64_t batches = 0;        // this rank's batches in that epoch
  std::int64_t skip = 0;           // to pass over when the next iteration begins
  std::function<std::int64_t()> next_epoch;        // the loader's epoch()
  std::function<void(std::int64_t)> set_epoch;     // the loader's set_epoch()
  std::int64_t samples = 0;
  std::int64_t batch_size = 0;
  bool shuffle = false;
  std::uint64_t seed = 0;
  // Streaming loaders only: this rank's position as a checkpoint keeps it, and the check of a
  // saved one (its file named for errors) that returns the step making it the next start.
  std::function<std::vector<std::int64_t>()> stream_position;
  std::function<std::function<void()>(const std::vector<std::int64_t>&, const std::string&)>
      stage_stream;
};

// A streaming loader's `samples`, which no map-style loader has.
inline constexpr std::int64_t streaming_samples = -1;

template <class Loader>
LoaderPosition loader_position(Loader& loader) {
  LoaderPosition position;
  position.identity = &loader;
  position.next_epoch = [&loader] { return loader.epoch(); };
  position.set_epoch = [&loader](std::int64_t epoch) { loader.set_epoch(epoch); };
  if constexpr (requires { loader.checkpoint_position(); }) {
    position.samples = streaming_samples;
    position.stream_position = [&loader] { return loader.checkpoint_position(); };
    position.stage_stream = [&loader](const std::vector<std::int64_t>& saved,
                                      const std::string& where) {
      return loader.stage_position(saved, where);
    };
  } else {
    position.samples = loader.num_samples();
  }
  position.batch_size = loader.options().batch_size;
  position.shuffle = loader.options().shuffle;
  position.seed = loader.options().seed;
  return position;
}

}  // namespace accel::state
