// The shared-memory transport's all-reduce (runtime/shm/) from 4 KiB to 64 MiB of fp32, against
// memcpy of the same bytes measured in the same run on the same rank:
//
//   accel-launch --nproc 2 -- build/bench/accel_shm_allreduce [--repeat N]
//
// Rank 0 prints one row per size: the all-reduce's algorithm bandwidth (bytes of the tensor over
// the time of one all-reduce, median of N), memcpy's bandwidth over the same bytes, their ratio;
// then `shm_allreduce_vs_memcpy_at_1MiB_and_up=<lowest ratio from 1 MiB up>`. Last, on rank 0
// alone, the reduction loop by itself (runtime/shm/elements.hpp): two inputs summed, scaled and
// written back into both, as a rank's share of Ddp's buckets is, by the one-pass loop and by the
// general blocked loop, with the last level of cache flushed before each; the last line is
// `one_pass_vs_blocked_at_4MiB_and_up=<lowest speed-up from 4 MiB up>`.
// Torch-free: it measures the transport alone (bench/run.sh measures it inside Ddp training).
#include <accel/runtime/shm/elements.hpp>
#include <accel/runtime/shm/transport.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace shm = accel::runtime::shm;
using Clock = std::chrono::steady_clock;

namespace {

int env(const char* name) {
  const char* raw = std::getenv(name);
  return raw == nullptr ? -1 : std::atoi(raw);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The one-pass loop against the blocked one on two inputs of `n` bytes each, written back into
// both; prints a row per size and the lowest speed-up from 4 MiB up.
void compare_reduction_loops(int repeat) {
  fmt::print("{:>10} {:>12} {:>12} {:>8}   (reduction loop alone, 2 inputs written back into "
             "both, fp32, median of {})\n",
             "bytes", "one pass", "blocked", "speed-up", repeat);
  std::vector<float> flush(std::size_t{64} << 20 >> 2);  // larger than the last level of cache
  double lowest = 1e9;
  for (std::size_t n = 64 << 10; n <= (std::size_t{16} << 20); n *= 4) {
    std::vector<float> a(n / 4, 1.0f), b(n / 4, 2.0f);
    std::byte* io[2] = {reinterpret_cast<std::byte*>(a.data()),
                        reinterpret_cast<std::byte*>(b.data())};
    const auto timed = [&](auto&& loop) {
      for (float& f : flush) f += 1.0f;
      const auto start = Clock::now();
      loop();
      return std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<double> one_pass_s, blocked_s;
    for (int r = 0; r < repeat; ++r) {
      one_pass_s.push_back(timed([&] {
        if (!shm::elements::reduce_in_one_pass<float>(io, 2, io, true, a.size(),
                                                      shm::Reduction::sum, 0.5))
          std::abort();
      }));
      blocked_s.push_back(timed([&] {
        shm::elements::reduce<float>(io, 2, io, 2, a.size(), shm::Reduction::sum, 0.5);
      }));
    }
    const double one_pass = median(one_pass_s), blocked = median(blocked_s);
    if (n >= (std::size_t{4} << 20)) lowest = std::min(lowest, blocked / one_pass);
    fmt::print("{:>10} {:>9.3f} ms {:>9.3f} ms {:>8.2f}\n", n, one_pass * 1e3, blocked * 1e3,
               blocked / one_pass);
  }
  fmt::print("one_pass_vs_blocked_at_4MiB_and_up={:.2f}\n", lowest);
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 20;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--repeat" && i + 1 < argc) repeat = std::atoi(argv[++i]);
  const int rank = env("RANK"), size = env("WORLD_SIZE");
  const char* store = std::getenv("ACCEL_STORE_DIR");
  if (rank < 0 || size < 2 || store == nullptr || repeat < 1) {
    fmt::print(stderr, "usage: accel-launch --nproc N (N >= 2) -- accel_shm_allreduce [--repeat N]\n");
    return 2;
  }
  constexpr std::size_t slot = std::size_t{1} << 20;  // what the ProcessGroup uses
  const std::string name = shm::segment_name(shm::run_token_of(store), 0);
  const std::size_t bytes = shm::Transport::segment_bytes(size, slot);
  shm::Transport transport(rank == 0 ? shm::Segment::create(name, bytes)
                                     : shm::Segment::open(name, bytes, std::chrono::seconds(60)),
                           rank, size, slot, std::chrono::seconds(60));
  if (rank == 0)
    fmt::print("{:>10} {:>12} {:>12} {:>8}   ({} ranks, fp32 sum, median of {})\n", "bytes",
               "allreduce", "memcpy", "ratio", size, repeat);
  double lowest = 1e9;
  for (std::size_t n = 4096; n <= (std::size_t{64} << 20); n *= 4) {
    std::vector<float> data(n / 4, 1.0f), source(n / 4, 2.0f), target(n / 4);
    std::vector<double> reduce_s, copy_s;
    for (int r = 0; r < repeat + 2; ++r) {
      auto start = Clock::now();
      transport.allreduce(data.data(), data.size(), shm::DataType::f32, shm::Reduction::sum);
      const double reduce = std::chrono::duration<double>(Clock::now() - start).count();
      start = Clock::now();
      std::memcpy(target.data(), source.data(), n);
      const double copy = std::chrono::duration<double>(Clock::now() - start).count();
      if (r >= 2) {  // the first two warm the pages
        reduce_s.push_back(reduce);
        copy_s.push_back(copy);
      }
    }
    const double reduce_gbs = static_cast<double>(n) / median(reduce_s) / 1e9;
    const double copy_gbs = static_cast<double>(n) / median(copy_s) / 1e9;
    if (n >= (std::size_t{1} << 20)) lowest = std::min(lowest, reduce_gbs / copy_gbs);
    if (rank == 0)
      fmt::print("{:>10} {:>9.2f} GB/s {:>7.2f} GB/s {:>8.3f}\n", n, reduce_gbs, copy_gbs,
                 reduce_gbs / copy_gbs);
  }
  if (rank == 0) fmt::print("shm_allreduce_vs_memcpy_at_1MiB_and_up={:.3f}\n", lowest);
  if (rank == 0) compare_reduction_loops(repeat);
  return 0;
}
