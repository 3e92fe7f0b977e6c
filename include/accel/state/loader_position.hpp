// Where a prepared loader stands, as the Accelerator records it for checkpoints: the epoch under
// way and how many of this rank's batches of it were served. A resumed run sets the loader's
// epoch and passes over those batches, so that it continues with exactly the next batch. What
// identifies the data (samples, batch size, shuffle and seed) is kept too: a checkpoint taken over
// other data cannot resume exactly, and says so.
#pragma once

#include <cstdint>
#include <functional>

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
};

template <class Loader>
LoaderPosition loader_position(Loader& loader) {
  LoaderPosition position;
  position.identity = &loader;
  position.next_epoch = [&loader] { return loader.epoch(); };
  position.set_epoch = [&loader](std::int64_t epoch) { loader.set_epoch(epoch); };
  position.samples = loader.num_samples();
  position.batch_size = loader.options().batch_size;
  position.shuffle = loader.options().shuffle;
  position.seed = loader.options().seed;
  return position;
}

}  // namespace accel::state
