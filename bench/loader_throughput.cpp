// DataLoader throughput with worker threads (LoaderOptions::num_workers) over a decode-heavy
// dataset, against num_workers = 0 measured in the same run:
//
//   build/bench/accel_loader_bench [--samples N] [--batch B] [--rounds R] [--workers 0,1,2,4]
//                                  [--threads T]
//
// Each sample is a synthetic 3x128x128 8-bit image stored deflated (zlib, as a PNG's pixels
// are); get() inflates it and converts it to a normalised float tensor, which is where a real
// image dataset spends its time. Two loops per worker count, alternating over R rounds (the
// median is kept, so drift hits every count alike):
//   load:  the loop only takes the batches: the loader's own samples/s;
//   train: the loop runs a small MLP's forward, backward and SGD step on each batch, so the
//          workers' decoding overlaps the step (what a training loop sees).
// Prints one row per loop and worker count, with the ratio to num_workers = 0 of the same loop
// and the cores the process got (CPU time over wall time: below the workers' count + 1 when
// other processes take the machine's cores, which then caps the ratio too);
// the last line is `loader_speedup_2_workers=<load ratio at 2 workers>`.
#include <accel/data/loader.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "blas_threads.hpp"

#if defined(ACCEL_BENCH_ZLIB)
#include <zlib.h>
#endif

namespace {

constexpr std::int64_t kChannels = 3, kSide = 128, kPixels = kChannels * kSide * kSide;

struct Image {
  torch::Tensor pixels;  // float, 3x128x128, normalised
  torch::Tensor label;   // int64 scalar
};

// A smooth pattern plus noise: deflate shrinks it about 2x, as it does photographs' pixels, and
// inflating it costs what decoding a real image does.
std::vector<unsigned char> synthetic_pixels(std::int64_t index) {
  std::vector<unsigned char> pixels(static_cast<std::size_t>(kPixels));
  std::uint64_t state = static_cast<std::uint64_t>(index) * 0x9e3779b97f4a7c15ULL + 1;
  for (std::int64_t c = 0; c < kChannels; ++c)
    for (std::int64_t y = 0; y < kSide; ++y)
      for (std::int64_t x = 0; x < kSide; ++x) {
        const auto noise = static_cast<std::int64_t>(accel::data::splitmix64(state) % 4);
        pixels[static_cast<std::size_t>((c * kSide + y) * kSide + x)] =
            static_cast<unsigned char>((x * (c + 1) + y * 2 + index + noise) % 256);
      }
  return pixels;
}

#if defined(ACCEL_BENCH_ZLIB)
constexpr std::string_view kDecoder = "zlib inflate";
std::vector<unsigned char> encode(const std::vector<unsigned char>& pixels) {
  uLongf size = compressBound(static_cast<uLong>(pixels.size()));
  std::vector<unsigned char> out(size);
  if (compress2(out.data(), &size, pixels.data(), static_cast<uLong>(pixels.size()), 6) != Z_OK)
    accel::detail::fail("loader bench: zlib's compress2 failed");
  out.resize(size);
  return out;
}
void decode(const std::vector<unsigned char>& encoded, unsigned char* pixels) {
  uLongf size = static_cast<uLongf>(kPixels);
  if (uncompress(pixels, &size, encoded.data(), static_cast<uLong>(encoded.size())) != Z_OK ||
      size != static_cast<uLongf>(kPixels))
    accel::detail::fail("loader bench: zlib's uncompress failed");
}
#else
// Without zlib: a byte-wise delta code undone with a fixed amount of arithmetic per byte.
constexpr std::string_view kDecoder = "delta decode (no zlib in this build)";
std::vector<unsigned char> encode(const std::vector<unsigned char>& pixels) {
  std::vector<unsigned char> out(pixels.size());
  unsigned char previous = 0;
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    out[i] = static_cast<unsigned char>(pixels[i] - previous);
    previous = pixels[i];
  }
  return out;
}
volatile std::uint32_t decode_sink = 0;
void decode(const std::vector<unsigned char>& encoded, unsigned char* pixels) {
  unsigned char previous = 0;
  std::uint32_t work = 0;
  for (std::size_t i = 0; i < encoded.size(); ++i) {
    pixels[i] = previous = static_cast<unsigned char>(previous + encoded[i]);
    for (int round = 0; round < 16; ++round)  // stands in for an entropy decoder's work
      work = work * 33u + previous;
  }
  decode_sink = work;  // the work is kept, not optimised away
}
#endif

// get() is const and touches only its own buffers: safe on several workers at once.
struct CompressedImages {
  std::shared_ptr<const std::vector<std::vector<unsigned char>>> encoded;

  explicit CompressedImages(std::int64_t samples) {
    auto blobs = std::make_shared<std::vector<std::vector<unsigned char>>>();
    for (std::int64_t i = 0; i < samples; ++i) blobs->push_back(encode(synthetic_pixels(i)));
    encoded = std::move(blobs);
  }
  std::int64_t size() const { return static_cast<std::int64_t>(encoded->size()); }
  Image get(std::int64_t index) const {
    auto bytes = torch::empty({kChannels, kSide, kSide}, torch::kUInt8);
    decode((*encoded)[static_cast<std::size_t>(index)], bytes.data_ptr<std::uint8_t>());
    auto pixels = (bytes.to(torch::kFloat32).div_(255.0f).sub_(0.5f)).div_(0.25f);
    return {pixels, torch::tensor(index % 10)};
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Step {
  torch::nn::Sequential net{torch::nn::Linear(kPixels, 64), torch::nn::ReLU(),
                            torch::nn::Linear(64, 10)};
  torch::optim::SGD sgd{net->parameters(), 0.01};
  void operator()(const Image& batch) {
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(batch.pixels.flatten(1)), batch.label)
        .backward();
    sgd.step();
  }
};

// Samples per second over one epoch of `loader`, with or without a training step per batch.
volatile double checksum_sink = 0;

struct Rate {
  double samples_per_s;
  double cores;  // the process's CPU time over the wall time: the cores it actually got
};

// One epoch of `loader`, with or without a training step per batch.
template <class Loader>
Rate measure(Loader& loader, Step* step) {
  double checksum = 0;
  const std::clock_t cpu_start = std::clock();  // CPU time of every thread of the process
  const auto start = std::chrono::steady_clock::now();
  for (const Image& batch : loader) {
    if (step) (*step)(batch);
    else checksum += batch.label.sum().template item<double>();  // touch it, as a loop would
  }
  const double seconds = seconds_since(start);
  const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  checksum_sink = checksum;  // keeps the loop's reads
  return {static_cast<double>(loader.num_samples()) / seconds, cpu / seconds};
}

std::vector<int> parse_list(std::string_view text) {
  std::vector<int> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    out.push_back(std::stoi(std::string(text.substr(0, comma))));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t samples = 2048, batch = 64;
  int rounds = 3, threads = 1;
  std::vector<int> worker_counts{0, 1, 2, 4};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i], value = argv[i + 1];
    if (flag == "--samples") samples = std::stoll(std::string(value));
    else if (flag == "--batch") batch = std::stoll(std::string(value));
    else if (flag == "--rounds") rounds = std::stoi(std::string(value));
    else if (flag == "--threads") threads = std::stoi(std::string(value));
    else if (flag == "--workers") worker_counts = parse_list(value);
    else {
      fmt::print(stderr, "usage: accel_loader_bench [--samples N] [--batch B] [--rounds R] "
                         "[--workers 0,1,2,4] [--threads T]\n");
      return 2;
    }
  }
  if (std::find(worker_counts.begin(), worker_counts.end(), 0) == worker_counts.end())
    worker_counts.insert(worker_counts.begin(), 0);  // the reference
  // torch's intra-op threads are shared by the loop and every worker (set_num_threads is
  // process-wide), and so are OpenBLAS's: 1 keeps the comparison about the workers.
  torch::set_num_threads(threads);
  limit_blas_threads(threads);
  torch::manual_seed(0);
  const CompressedImages dataset(samples);
  std::int64_t stored = 0;
  for (const auto& blob : *dataset.encoded) stored += static_cast<std::int64_t>(blob.size());
  const double stored_pct =
      100.0 * static_cast<double>(stored) / static_cast<double>(samples * kPixels);
  fmt::print("{} samples of {} bytes stored in {:.0f}% ({}), batch {}, {} torch thread(s), "
             "{} hardware threads, median of {} rounds\n",
             samples, kPixels, stored_pct, kDecoder, batch, threads,
             std::thread::hardware_concurrency(), rounds);

  double load_ratio_at_2 = 0;
  for (const bool train : {false, true}) {
    std::vector<std::vector<double>> rates(worker_counts.size()), cores(worker_counts.size());
    Step step;
    for (int round = 0; round < rounds + 1; ++round)  // round 0 warms up: allocator, pages
      for (std::size_t w = 0; w < worker_counts.size(); ++w) {
        accel::DataLoader loader(dataset, {.batch_size = batch, .shuffle = true, .seed = 1,
                                           .num_workers = worker_counts[w]});
        const Rate rate = measure(loader, train ? &step : nullptr);
        if (round > 0) rates[w].push_back(rate.samples_per_s), cores[w].push_back(rate.cores);
      }
    const double reference = median(rates[0]);
    for (std::size_t w = 0; w < worker_counts.size(); ++w) {
      const double rate = median(rates[w]);
      fmt::print("loop={} num_workers={} samples_per_s={:.0f} ratio={:.2f} cores_used={:.2f}\n",
                 train ? "train" : "load", worker_counts[w], rate, rate / reference,
                 median(cores[w]));
      if (!train && worker_counts[w] == 2) load_ratio_at_2 = rate / reference;
    }
  }
  fmt::print("loader_speedup_2_workers={:.2f}\n", load_ratio_at_2);
}
