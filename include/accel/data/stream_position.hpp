// Where one rank of a StreamingLoader stands, as a checkpoint keeps it: a flat list of integers
// (one int64 tensor in the rank's file), so that no sample is saved, only where to read it
// again. Without a begun epoch (`workers` empty) it says which epoch the next iteration starts.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "stream.hpp"

namespace accel::data {

struct StreamPosition {
  int world = 1;
  int rank = 0;
  int worker_count = 1;
  std::int64_t epoch = 0;
  std::int64_t pass = 0;    // 0: the epoch's first reading; n: its n-th wrap-around
  std::int64_t turn = 0;    // the worker whose batch is served next
  std::int64_t served = 0;  // batches served in the epoch
  std::vector<bool> finished;           // per worker: its batches ran out
  std::vector<WorkerPosition> workers;  // per worker; empty: the epoch has not begun

  bool begun() const { return !workers.empty(); }
};

inline constexpr std::int64_t stream_position_format = 1;

inline std::vector<std::int64_t> encode(const StreamPosition& p) {
  std::vector<std::int64_t> out{stream_position_format, p.world, p.rank, p.worker_count, p.epoch,
                                p.pass, p.turn, p.served,
                                static_cast<std::int64_t>(p.workers.size())};
  for (std::size_t w = 0; w < p.workers.size(); ++w) {
    const WorkerPosition& worker = p.workers[w];
    out.insert(out.end(), {w < p.finished.size() && p.finished[w] ? 1 : 0, worker.shard_at,
                           worker.offset, std::bit_cast<std::int64_t>(worker.generator),
                           static_cast<std::int64_t>(worker.buffered.size())});
    for (const auto& [at, offset] : worker.buffered) out.insert(out.end(), {at, offset});
  }
  return out;
}

// `where` names the checkpoint file in errors.
inline StreamPosition decode(const std::vector<std::int64_t>& in, const std::string& where) {
  std::size_t at = 0;
  auto take = [&]() -> std::int64_t {
    if (at >= in.size())
      accel::detail::fail("load_state: the streaming loader's position in '{}' is cut short ({} "
                          "numbers); the file is damaged",
                          where, in.size());
    return in[at++];
  };
  StreamPosition p;
  if (const auto format = take(); format != stream_position_format)
    accel::detail::fail("load_state: the streaming loader's position in '{}' has format {}; this "
                        "accel reads format {}",
                        where, format, stream_position_format);
  p.world = static_cast<int>(take());
  p.rank = static_cast<int>(take());
  p.worker_count = static_cast<int>(take());
  p.epoch = take();
  p.pass = take();
  p.turn = take();
  p.served = take();
  const std::int64_t workers = take();
  if (workers < 0 || workers > static_cast<std::int64_t>(in.size()))
    accel::detail::fail("load_state: the streaming loader's position in '{}' lists {} workers; "
                        "the file is damaged",
                        where, workers);
  for (std::int64_t w = 0; w < workers; ++w) {
    p.finished.push_back(take() != 0);
    WorkerPosition worker;
    worker.shard_at = take();
    worker.offset = take();
    worker.generator = std::bit_cast<std::uint64_t>(take());
    const std::int64_t buffered = take();
    if (buffered < 0 || buffered > static_cast<std::int64_t>(in.size()))
      accel::detail::fail("load_state: the streaming loader's position in '{}' lists {} buffered "
                          "samples; the file is damaged",
                          where, buffered);
    for (std::int64_t b = 0; b < buffered; ++b) {
      const std::int64_t shard_at = take();
      worker.buffered.emplace_back(shard_at, take());
    }
    p.workers.push_back(std::move(worker));
  }
  return p;
}

}  // namespace accel::data
