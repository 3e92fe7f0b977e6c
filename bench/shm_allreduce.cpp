// The shared-memory transport's all-reduce (runtime/shm/) from 4 KiB to 64 MiB of fp32, against
// memcpy of the same bytes measured in the same run on the same rank:
//
//   accel-launch --nproc 2 -- build/bench/accel_shm_allreduce [--repeat N]
//
// Rank 0 prints one row per size: the all-reduce's algorithm bandwidth (bytes of the tensor over
// the time of one all-reduce, median of N), memcpy's bandwidth over the same bytes, their ratio;
// the last line is `shm_allreduce_vs_memcpy_at_1MiB_and_up=<lowest ratio from 1 MiB up>`.
// Torch-free: it measures the transport alone (bench/run.sh measures it inside Ddp training).
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
  return 0;
}
