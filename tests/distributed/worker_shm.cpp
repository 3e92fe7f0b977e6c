// The shared-memory transport (runtime/shm/) on raw buffers, on real processes, without torch:
// every collective, dtype and reduction against a reference computed here in rank order, sizes
// 0, 1, odd, not divisible by the world size and many times the slot; and the faults (a
// mismatched collective, a peer that exits, a peer that stops). Started by accel-launch (or by
// shm.sh, for the faults the launcher would otherwise end first): RANK, WORLD_SIZE and
// ACCEL_STORE_DIR (whose name gives the run token) come from the environment.
#include <accel/runtime/shm/regions.hpp>
#include <accel/runtime/shm/transport.hpp>

#include "run_scenario.hpp"

#include <signal.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace shm = accel::runtime::shm;

namespace {

int env(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr) throw std::runtime_error(fmt::format("{} is not set", name));
  return std::atoi(raw);
}
const int rank = env("RANK");
const int size = env("WORLD_SIZE");

std::string run_token() {
  const char* dir = std::getenv("ACCEL_STORE_DIR");
  if (dir == nullptr) throw std::runtime_error("ACCEL_STORE_DIR is not set");
  return shm::run_token_of(dir);
}

// A transport with small slots (many pieces per collective) over segment number `group`.
shm::Transport connect(int group, std::size_t slot_bytes = 4096,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const std::string name = shm::segment_name(run_token(), group);
  const std::size_t bytes = shm::Transport::segment_bytes(size, slot_bytes);
  shm::Segment segment = rank == 0 ? shm::Segment::create(name, bytes)
                                   : shm::Segment::open(name, bytes, timeout);
  return shm::Transport(std::move(segment), rank, size, slot_bytes, timeout);
}

// Rank r's value i: small multiples of 1/8, exact in every type (bf16 included) and in their
// sums over up to 4 ranks, except where `inexact` asks for values whose fp32 sum rounds.
double value(int r, std::size_t i, bool inexact) {
  const auto k = static_cast<long>((static_cast<std::size_t>(r) * 7919 + i * 104729) % 61) - 30;
  return inexact ? static_cast<double>(k) * 0.1 + 1e-3 * r : static_cast<double>(k) / 8;
}

template <class T>
struct Codec;
template <>
struct Codec<float> {
  static constexpr shm::DataType type = shm::DataType::f32;
  static float make(double v) { return static_cast<float>(v); }
  static double read(float v) { return v; }
};
template <>
struct Codec<double> {
  static constexpr shm::DataType type = shm::DataType::f64;
  static double make(double v) { return v; }
  static double read(double v) { return v; }
};
template <>
struct Codec<std::int64_t> {
  static constexpr shm::DataType type = shm::DataType::i64;
  static std::int64_t make(double v) { return static_cast<std::int64_t>(v * 8); }
  static double read(std::int64_t v) { return static_cast<double>(v); }
};
template <>
struct Codec<std::int32_t> {
  static constexpr shm::DataType type = shm::DataType::i32;
  static std::int32_t make(double v) { return static_cast<std::int32_t>(v * 8); }
  static double read(std::int32_t v) { return static_cast<double>(v); }
};
template <>
struct Codec<shm::elements::Bf16> {
  static constexpr shm::DataType type = shm::DataType::bf16;
  // The values are exact in bf16: truncating the float's low bits loses nothing.
  static shm::elements::Bf16 make(double v) {
    std::uint32_t bits = 0;
    const auto f = static_cast<float>(v);
    std::memcpy(&bits, &f, 4);
    return {static_cast<std::uint16_t>(bits >> 16)};
  }
  static double read(shm::elements::Bf16 v) { return shm::elements::to_float(v); }
};
#if defined(__FLT16_MANT_DIG__)
template <>
struct Codec<_Float16> {
  static constexpr shm::DataType type = shm::DataType::f16;
  static _Float16 make(double v) { return static_cast<_Float16>(v); }
  static double read(_Float16 v) { return static_cast<double>(v); }
};
#endif

// The sizes every collective is checked at, in elements: 0, 1, odd, prime, not a multiple of
// the world size, and several slots' worth.
std::vector<std::size_t> sizes(std::size_t slot_elements) {
  return {0, 1, 7, 1001, 3 * slot_elements + 5};
}

// The rank-order reduction this test expects, computed in T's own accumulator: a plain loop.
template <class T>
double expected(shm::Reduction op, std::size_t i, bool inexact) {
  using A = typename shm::elements::Accumulator<T>::type;
  A acc = static_cast<A>(Codec<T>::read(Codec<T>::make(value(0, i, inexact))));
  for (int r = 1; r < size; ++r) {
    const A v = static_cast<A>(Codec<T>::read(Codec<T>::make(value(r, i, inexact))));
    if (op == shm::Reduction::max) acc = v > acc ? v : acc;
    else if (op == shm::Reduction::min) acc = v < acc ? v : acc;
    else acc += v;
  }
  if (op == shm::Reduction::mean) acc /= static_cast<A>(size);
  return static_cast<double>(acc);
}

template <class T>
void check_reductions(shm::Transport& transport, bool inexact) {
  constexpr bool floating = !std::is_integral_v<T>;
  std::vector<shm::Reduction> ops{shm::Reduction::sum, shm::Reduction::max, shm::Reduction::min};
  if (floating) ops.push_back(shm::Reduction::mean);
  const std::size_t slot_elements = transport.slot_bytes() / sizeof(T);
  for (const auto op : ops) {
    // Half types round the mean once more: compare it within one unit in the last place.
    const bool rounded_mean = op == shm::Reduction::mean && sizeof(T) == 2;
    for (const std::size_t n : sizes(slot_elements)) {
      std::vector<T> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = Codec<T>::make(value(rank, i, inexact));
      transport.allreduce(data.data(), n, Codec<T>::type, op);
      for (std::size_t i = 0; i < n; ++i) {
        const double want = expected<T>(op, i, inexact);
        const double got = Codec<T>::read(data[i]);
        if (rounded_mean ? std::abs(got - want) > std::abs(want) / 128 : got != want)
          throw std::runtime_error(fmt::format(
              "allreduce {} of {} x {}: element {} is {}, expected {}", static_cast<int>(op), n,
              shm::to_string(Codec<T>::type), i, got, want));
      }
      // Reduce-scatter: chunk c of rank r's input is the same formula at index c * n + i.
      std::vector<T> input(n * static_cast<std::size_t>(size));
      for (std::size_t i = 0; i < input.size(); ++i) input[i] = Codec<T>::make(value(rank, i, inexact));
      std::vector<T> output(n);
      if (op == shm::Reduction::sum || op == shm::Reduction::mean) {
        transport.reduce_scatter(input.data(), output.data(), n, Codec<T>::type, op);
        for (std::size_t i = 0; i < n; ++i) {
          const double want = expected<T>(op, static_cast<std::size_t>(rank) * n + i, inexact);
          const double got = Codec<T>::read(output[i]);
          if (rounded_mean ? std::abs(got - want) > std::abs(want) / 128 : got != want)
            throw std::runtime_error(fmt::format("reduce_scatter of {} x {}: element {} is {}, "
                                                 "expected {}",
                                                 n, shm::to_string(Codec<T>::type), i, got, want));
        }
      }
    }
  }
}

void check_byte_collectives(shm::Transport& transport) {
  for (const std::size_t n : sizes(transport.slot_bytes())) {
    std::vector<std::uint8_t> mine(n), all(n * static_cast<std::size_t>(size));
    for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<std::uint8_t>(rank * 31 + i);
    transport.allgather(mine.data(), all.data(), n);
    for (int r = 0; r < size; ++r)
      for (std::size_t i = 0; i < n; ++i)
        EXPECT(all[static_cast<std::size_t>(r) * n + i] == static_cast<std::uint8_t>(r * 31 + i));
    // In place: this rank's part of the output is the input.
    std::vector<std::uint8_t> in_place(n * static_cast<std::size_t>(size));
    std::memcpy(in_place.data() + static_cast<std::size_t>(rank) * n, mine.data(), n);
    transport.allgather(in_place.data() + static_cast<std::size_t>(rank) * n, in_place.data(), n);
    EXPECT(in_place == all);
    for (const int root : {0, size - 1}) {
      std::vector<std::uint8_t> data(n, static_cast<std::uint8_t>(rank));
      if (rank == root)
        for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<std::uint8_t>(i * 7 + root);
      transport.broadcast(data.data(), n, root);
      for (std::size_t i = 0; i < n; ++i) EXPECT(data[i] == static_cast<std::uint8_t>(i * 7 + root));
    }
  }
}

// Regions of `bytes` per rank over segment number `group`, mapped by every rank.
shm::Regions map_regions(shm::Transport& transport, int group, std::size_t bytes) {
  const std::string name = shm::segment_name(run_token(), group);
  const std::size_t total = shm::Regions::segment_bytes(size, bytes);
  shm::Regions regions(rank == 0 ? shm::Segment::create(name, total)
                                 : shm::Segment::open(name, total, std::chrono::seconds(30)),
                       rank, size, bytes);
  transport.regions_mapped(bytes);
  regions.unlink();
  return regions;
}

// All-reduce in place in the regions (Ddp's shared buckets): each rank's region holds its values
// everywhere but where the collective runs; afterwards every rank's region holds, there, the
// rank-order sum times the scale, computed as T's own arithmetic does (the Reducer's average is
// that multiplication), and its own values everywhere else.
template <class T>
void check_region_allreduce(shm::Transport& transport, shm::Regions& regions) {
  const std::size_t elements = regions.bytes() / sizeof(T);
  T* mine = reinterpret_cast<T*>(regions.mine());
  for (const double scale : {1.0, 1.0 / size}) {
    for (const std::size_t n : sizes(elements / 8)) {
      for (const std::size_t first : {std::size_t{0}, std::size_t{16}, elements - n}) {
        for (std::size_t i = 0; i < elements; ++i)
          mine[i] = Codec<T>::make(value(rank, i, /*inexact=*/true));
        transport.allreduce_regions(regions.bases(), first * sizeof(T), n, Codec<T>::type, scale);
        for (int r = 0; r < size; ++r) {
          const T* theirs = reinterpret_cast<const T*>(regions.bases()[r]);
          for (std::size_t i = 0; i < elements; ++i) {
            T want = Codec<T>::make(value(r, i, true));
            if (i >= first && i < first + n) {
              want = Codec<T>::make(value(0, i, true));
              for (int q = 1; q < size; ++q) want += Codec<T>::make(value(q, i, true));
              if (scale != 1.0) want *= static_cast<T>(scale);
            }
            // Rank r's values outside the range may change again once r is past the last
            // barrier: only this rank's own are compared there.
            if ((i >= first && i < first + n) || r == rank) {
              if (theirs[i] != want)
                throw std::runtime_error(fmt::format(
                    "allreduce_regions of {} x {} at {}, scale {}: rank {}'s element {} is {}, "
                    "expected {}",
                    n, shm::to_string(Codec<T>::type), first, scale, r, i, theirs[i], want));
            }
          }
        }
        // No rank refills its region until every rank has read the result in all of them.
        transport.regions_mapped(regions.bytes());
      }
    }
  }
}

// Runs `call`, which must fail with an accel: error containing `part`.
void expect_error(const std::function<void()>& call, const std::string& part) {
  try {
    call();
  } catch (const accel::Error& error) {
    const std::string what = error.what();
    fmt::print("rank {}: {}\n", rank, what);
    if (what.find(part) == std::string::npos)
      throw std::runtime_error(fmt::format("the error does not say '{}': {}", part, what));
    return;
  }
  throw std::runtime_error(fmt::format("no error; expected one saying '{}'", part));
}

const accel_test::Scenarios scenarios = {
    {"exact",
     [] {
       shm::Transport transport = connect(0);
       check_reductions<float>(transport, /*inexact=*/true);
       check_reductions<float>(transport, false);
       check_reductions<double>(transport, true);
       check_reductions<shm::elements::Bf16>(transport, false);
#if defined(__FLT16_MANT_DIG__)
       check_reductions<_Float16>(transport, false);
#endif
       check_reductions<std::int64_t>(transport, false);
       check_reductions<std::int32_t>(transport, false);
       check_byte_collectives(transport);
       // A second transport of the same run (another group) beside the first.
       shm::Transport second = connect(1, 1 << 16);
       check_reductions<float>(second, true);
     }},
    {"regions",
     [] {
       shm::Transport transport = connect(0);
       // Not a multiple of the page: every region still starts on a page of its own.
       shm::Regions regions = map_regions(transport, 2, 3 * 4096 * 8 + 40);
       for (int r = 0; r < size; ++r)
         EXPECT(reinterpret_cast<std::uintptr_t>(regions.bases()[r]) % 4096 == 0);
       check_region_allreduce<float>(transport, regions);
       check_region_allreduce<double>(transport, regions);
       // Buckets at different places on different ranks are refused on every rank, naming them.
       expect_error(
           [&] {
             transport.allreduce_regions(regions.bases(), rank == 0 ? 0 : 64, 4,
                                         shm::DataType::f32, 1.0);
           },
           "at byte 64");
     }},
    // Rank 1 calls an all-gather where the others call an all-reduce: every rank fails, naming
    // each rank's call, and the transport refuses to go on.
    {"mismatch",
     [] {
       shm::Transport transport = connect(0);
       std::vector<float> data(10, 1.0f);
       expect_error(
           [&] {
             if (rank == 1)
               transport.allgather(data.data(), data.data(), 0);
             else
               transport.allreduce(data.data(), data.size(), shm::DataType::f32,
                                   shm::Reduction::sum);
           },
           "mismatched collective");
       expect_error([&] { transport.broadcast(data.data(), 4, 0); }, "cannot be used any more");
     }},
    // The last rank dies (SIGKILL) before its all-reduce: the others fail at once, naming it,
    // well before the 60 s timeout.
    {"peer_exits",
     [] {
       shm::Transport transport = connect(0, 4096, std::chrono::seconds(60));
       std::vector<float> data(100000, 1.0f);
       transport.allreduce(data.data(), data.size(), shm::DataType::f32, shm::Reduction::sum);
       if (rank == size - 1) ::raise(SIGKILL);
       expect_error(
           [&] {
             transport.allreduce(data.data(), data.size(), shm::DataType::f32,
                                 shm::Reduction::sum);
           },
           fmt::format("rank {} (pid", size - 1));
     }},
    // The last rank stops (SIGSTOP): the others fail after the 2 s timeout, naming it.
    {"peer_stops",
     [] {
       shm::Transport transport = connect(0, 4096, std::chrono::seconds(2));
       std::vector<float> data(1000, 1.0f);
       if (rank == size - 1) ::raise(SIGSTOP);
       expect_error(
           [&] {
             transport.allreduce(data.data(), data.size(), shm::DataType::f32,
                                 shm::Reduction::sum);
           },
           fmt::format("rank {} did not arrive within the timeout of 2 s", size - 1));
     }},
    // Rank 0 dies during set-up, after creating the segment and before the others attach: the
    // name stays in /dev/shm until the launcher removes it (shm.sh checks).
    {"killed_in_setup",
     [] {
       if (rank != 0) return;
       const std::string name = shm::segment_name(run_token(), 0);
       shm::Segment segment = shm::Segment::create(name, shm::Transport::segment_bytes(size, 4096));
       fmt::print("segment {}\n", name);  // for shm.sh to look for
       std::fflush(stdout);
       ::raise(SIGKILL);
     }},
};

}  // namespace

int main(int argc, char** argv) { return accel_test::run_scenario(argc, argv, scenarios); }
