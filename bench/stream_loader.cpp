// StreamingLoader over text shards (accel::data::TextFiles: each file mapped, read window by
// window) against the map-style DataLoader over the same windows held in memory, measured in the
// same run (bench/stream_loader.sh runs it; docs/how-to/streaming-data.md):
//
//   build/bench/accel_stream_bench --generate DIR [--files N] [--mb M]
//   build/bench/accel_stream_bench --dir DIR [--seq S] [--batch B] [--workers W]
//                                  [--shuffle-buffer K] [--rounds R]
//
// --generate writes N files of M MiB of pseudo-random words (default 8 of 8). The measurement
// reads every file of DIR into memory once for the DataLoader (a sample: a window's index, its
// bytes copied into a TokenWindow on get(), as the gpt example's --text does), then alternates an
// epoch of each loader R times (default 5), so drift on a shared machine hits both alike. Both
// loaders shuffle with the same seed, batch B windows of S + 1 bytes (default 64 of 64 + 1) and
// read on W worker threads (default 1); the stream draws from a shuffle buffer of K windows
// (default 1024). The loop only takes the batches and touches them: the loaders' own samples/s.
// Prints each round's samples/s of both, then the medians with min-max and the ratio
// stream / in memory (the median of the per-round ratios, with its min-max); the last line is
// `stream_over_memory=<ratio>`.
#include <accel/data/loader.hpp>
#include <accel/data/stream_files.hpp>
#include <accel/data/stream_loader.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "blas_threads.hpp"

namespace {

namespace fs = std::filesystem;
using accel::data::TokenWindow;

// The same windows as TextFiles: S + 1 bytes starting every S bytes of each file, files in name
// order, every file held in memory.
struct InMemoryWindows {
  std::shared_ptr<const std::vector<std::string>> files;
  std::vector<std::pair<std::int64_t, std::int64_t>> starts;  // (file, byte)
  std::int64_t seq = 64;

  InMemoryWindows(const std::vector<fs::path>& paths, std::int64_t seq_) : seq(seq_) {
    auto texts = std::make_shared<std::vector<std::string>>();
    for (const auto& path : paths) {
      std::ifstream in(path, std::ios::binary);
      texts->emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      const auto size = static_cast<std::int64_t>(texts->back().size());
      for (std::int64_t at = 0; at + seq + 1 <= size; at += seq)
        starts.emplace_back(static_cast<std::int64_t>(texts->size()) - 1, at);
    }
    files = std::move(texts);
  }
  std::int64_t size() const { return static_cast<std::int64_t>(starts.size()); }
  TokenWindow get(std::int64_t index) const {
    const auto [file, at] = starts[static_cast<std::size_t>(index)];
    const std::string& text = (*files)[static_cast<std::size_t>(file)];
    torch::Tensor window = torch::empty({seq + 1}, torch::kInt64);
    auto* out = window.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i <= seq; ++i)
      out[i] = static_cast<unsigned char>(text[static_cast<std::size_t>(at + i)]);
    return {window.narrow(0, 0, seq), window.narrow(0, 1, seq)};
  }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

volatile std::int64_t checksum_sink = 0;

// Samples per second over one epoch of `loader`.
template <class Loader>
double samples_per_second(Loader& loader) {
  std::int64_t samples = 0, checksum = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& batch : loader) {
    samples += batch.input.size(0);
    checksum += batch.target.select(1, 0).sum().template item<std::int64_t>();  // touch it
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  checksum_sink = checksum;
  return static_cast<double>(samples) / seconds;
}

void generate(const fs::path& dir, int files, std::int64_t mib) {
  fs::create_directories(dir);
  static constexpr std::string_view words[] = {"the ", "stream ", "of ", "bytes ", "reads ",
                                               "shard ", "window ", "and ", "loader ", "text\n"};
  std::uint64_t state = 1;
  for (int f = 0; f < files; ++f) {
    std::ofstream out(dir / fmt::format("shard_{:03}.txt", f), std::ios::binary);
    std::string chunk;
    for (std::int64_t written = 0; written < (mib << 20);) {
      chunk.clear();
      while (chunk.size() < (1 << 16)) chunk += words[accel::data::splitmix64(state) % 10];
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      written += static_cast<std::int64_t>(chunk.size());
    }
  }
  fmt::print("wrote {} files of {} MiB in {}\n", files, mib, dir.string());
}

int usage() {
  fmt::print(stderr,
             "usage: accel_stream_bench --generate DIR [--files N] [--mb M]\n"
             "       accel_stream_bench --dir DIR [--seq S] [--batch B] [--workers W] "
             "[--shuffle-buffer K] [--rounds R]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir, make;
  int files = 8, workers = 1, rounds = 5;
  std::int64_t mib = 8, seq = 64, batch = 64, buffer = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--generate") make = value;
    else if (flag == "--dir") dir = value;
    else if (flag == "--files") files = std::stoi(value);
    else if (flag == "--mb") mib = std::stoll(value);
    else if (flag == "--seq") seq = std::stoll(value);
    else if (flag == "--batch") batch = std::stoll(value);
    else if (flag == "--workers") workers = std::stoi(value);
    else if (flag == "--shuffle-buffer") buffer = std::stoll(value);
    else if (flag == "--rounds") rounds = std::stoi(value);
    else return usage();
  }
  if (argc % 2 == 0 || (make.empty() == dir.empty()) || rounds < 1) return usage();
  if (!make.empty()) {
    generate(make, files, mib);
    return 0;
  }
  torch::set_num_threads(1);  // the loaders' threads are the comparison, not torch's
  limit_blas_threads(1);

  accel::StreamingLoader stream(accel::data::TextFiles(dir, seq),
                                {.batch_size = batch, .shuffle = true, .shuffle_buffer = buffer,
                                 .seed = 1, .num_workers = workers});
  accel::DataLoader memory(InMemoryWindows(stream.dataset().files(), seq),
                           {.batch_size = batch, .shuffle = true, .seed = 1,
                            .num_workers = workers});
  fmt::print("{} files, {} windows of {} bytes, batch {}, {} worker(s), shuffle buffer {}\n",
             stream.shard_count(), memory.dataset().size(), seq + 1, batch, workers, buffer);
  std::vector<double> streamed, held, ratios;
  for (int round = 1; round <= rounds; ++round) {
    streamed.push_back(samples_per_second(stream));
    held.push_back(samples_per_second(memory));
    ratios.push_back(streamed.back() / held.back());
    fmt::print("round {}: stream {:.0f} samples/s, in memory {:.0f} samples/s\n", round,
               streamed.back(), held.back());
  }
  auto row = [](const char* name, const std::vector<double>& v) {
    fmt::print("{}: median {:.0f} samples/s (min {:.0f}, max {:.0f})\n", name, median(v),
               *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  };
  row("stream   ", streamed);
  row("in memory", held);
  fmt::print("stream / in memory: {:.3f} (per-round min {:.3f}, max {:.3f}, {} rounds)\n",
             median(ratios), *std::min_element(ratios.begin(), ratios.end()),
             *std::max_element(ratios.begin(), ratios.end()), rounds);
  fmt::print("stream_over_memory={:.3f}\n", median(ratios));
  return 0;
}
