// The streaming loader across processes: exact resume (5 steps + save + 5 resumed equal 10
// straight, mid epoch and mid accumulation window, with workers and a shuffle buffer), the end of
// an epoch whose shards run out at different times on different ranks (both StreamEnd policies,
// no hang), every sample of an epoch served once, and the refusal of another world size.
#include "scenario.hpp"

#include <accel/checkpoints.hpp>
#include <accel/data/stream_files.hpp>
#include <accel/data/stream_loader.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace dist_worker_stream {

namespace {

namespace fs = std::filesystem;
using accel_test::test_options;

struct Row {
  torch::Tensor id;
  torch::Tensor x;
};

// Shards in memory: shard s holds sizes[s] samples, whose ids are s * 1000 + offset.
struct Numbers {
  std::vector<std::int64_t> sizes;
  struct Reader {
    std::int64_t shard, at, size;
    std::optional<Row> next() {
      if (at >= size) return std::nullopt;
      const std::int64_t id = shard * 1000 + at++;
      return Row{torch::tensor(id), torch::full({4}, static_cast<float>(id % 97) / 97.0f)};
    }
  };
  std::int64_t shard_count() const { return static_cast<std::int64_t>(sizes.size()); }
  Reader open(std::int64_t shard, std::int64_t position) const {
    return {shard, position, sizes[static_cast<std::size_t>(shard)]};
  }
};
static_assert(accel::StreamingDataset<Numbers>);

// Every id of every shard, sorted.
std::vector<std::int64_t> all_ids(const Numbers& data) {
  std::vector<std::int64_t> ids;
  for (std::int64_t s = 0; s < data.shard_count(); ++s)
    for (std::int64_t i = 0; i < data.sizes[static_cast<std::size_t>(s)]; ++i)
      ids.push_back(s * 1000 + i);
  return ids;
}

// A folder every rank names alike: rank 0 makes it.
template <class Accel>
fs::path shared_folder(Accel& acc, const char* name) {
  std::string made;
  if (acc.is_main_process()) {
    const char* base = std::getenv("TMPDIR");
    made = std::string(base && *base ? base : "/tmp") + "/accel-stream-" + name + "-XXXXXX";
    EXPECT(::mkdtemp(made.data()) != nullptr);
  }
  return acc.gather_object(made)[0];
}

using Accel = accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>>;

const accel::StreamingOptions resume_options{.batch_size = 3, .shuffle = true,
                                             .shuffle_buffer = 7, .seed = 5, .num_workers = 2};

// Micro-steps `first` .. `last` - 1 over the stream, resuming from `from` if given and saving
// into `into` after the last: the ids of each batch and each loss, on this rank.
struct Trace {
  std::vector<std::vector<std::int64_t>> ids;
  std::vector<double> losses;
};
Trace train(int steps, const fs::path& from, const fs::path& into) {
  Accel acc(test_options());
  const int world = acc.num_processes();
  // 2 shards per rank and one more, of uneven sizes: rank 0 has the most.
  Numbers data;
  for (int s = 0; s < 2 * world + 1; ++s) data.sizes.push_back(8 + 3 * s);
  accel::StreamingLoader loader(data, resume_options);
  torch::manual_seed(7);
  torch::nn::Linear net(4, 1);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer, batches] = acc.prepare(net, sgd, loader);
  if (!from.empty()) acc.load_state(from);
  Trace trace;
  int step = 0;
  while (step < steps) {
    for (const auto& batch : batches) {
      const auto loss = model(batch.x).sum();
      acc.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
      trace.ids.emplace_back(batch.id.data_ptr<std::int64_t>(),
                             batch.id.data_ptr<std::int64_t>() + batch.id.numel());
      trace.losses.push_back(loss.item<double>());
      if (++step == steps) break;
    }
  }
  if (!into.empty()) acc.save_state(into);
  return trace;
}

// 5 steps, save (mid epoch, mid accumulation window: GradAccum<2>), resume 5: the same batches
// and the same losses, bitwise, as 10 straight; then a resume on another world size is refused.
void resume() {
  const Trace straight = train(10, {}, {});
  fs::path folder;
  {
    Accel acc(test_options());
    folder = shared_folder(acc, "resume");
  }
  const Trace first = train(5, {}, folder / "mid");
  const Trace second = train(5, folder / "mid", {});
  EXPECT(straight.ids.size() == 10);
  for (std::size_t i = 0; i < 10; ++i) {
    const Trace& part = i < 5 ? first : second;
    EXPECT(part.ids[i % 5] == straight.ids[i]);
    EXPECT(part.losses[i % 5] == straight.losses[i]);
  }
  // The saved position read by a loader of another world size: refused, naming both.
  Accel acc(test_options());
  const int world = acc.num_processes();
  accel::StreamingLoader loader(Numbers{{5, 5, 5, 5}}, resume_options);
  accel::StreamingLoader other(Numbers{{5, 5, 5, 5}}, resume_options);
  loader.set_process(0, world);
  other.set_process(0, world + 1);
  accel_test::expect_error([&] { (void)other.stage_position(loader.checkpoint_position(), "x"); },
                           fmt::format("saved by {} processes; this run has {}", world, world + 1));
  acc.wait_for_everyone();
  if (acc.is_main_process()) fs::remove_all(folder);
}

// Shards that hold more batches on rank 0 than on the others: every rank takes the same number
// of steps (no collective waits), as many as the first rank to end (stop) or the last (wrap).
void even_batches(accel::StreamEnd end) {
  Accel acc(test_options());
  const int world = acc.num_processes();
  Numbers data;  // shard r goes to rank r: rank r holds 4 * (r + 1) samples less than rank 0
  for (int r = 0; r < world; ++r) data.sizes.push_back(20 - 4 * r);
  accel::StreamingLoader loader(data, {.batch_size = 2, .num_workers = 1, .even_batches = end});
  auto batches = acc.prepare(loader);
  torch::NoGradGuard no_grad;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::int64_t count = 0;
    std::set<std::int64_t> seen;
    for (const auto& batch : batches) {
      ++count;
      for (std::int64_t i = 0; i < batch.id.numel(); ++i)
        seen.insert(batch.id[i].item<std::int64_t>());
    }
    const auto counts = acc.gather_object(count);
    for (const auto c : counts) EXPECT(c == counts.front());
    const std::int64_t mine = data.sizes[static_cast<std::size_t>(acc.process_index())];
    if (end == accel::StreamEnd::stop_at_first_end) {
      EXPECT(count == (20 - 4 * (world - 1)) / 2);  // the smallest rank's batches
    } else {
      EXPECT(count == 10);                                    // rank 0's
      EXPECT(static_cast<std::int64_t>(seen.size()) == mine);  // all of its own, repeated
    }
  }
}

// With 3 workers, a shuffle buffer and shards that split evenly over the ranks: every sample of
// an epoch once, over all ranks and workers.
void every_sample_once() {
  Accel acc(test_options());
  const int world = acc.num_processes();
  Numbers data;
  for (int s = 0; s < 3 * world; ++s) data.sizes.push_back(7);
  accel::StreamingLoader loader(
      data, {.batch_size = 2, .shuffle = true, .shuffle_buffer = 5, .seed = 3, .num_workers = 3});
  auto batches = acc.prepare(loader);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> ids;
  for (const auto& batch : batches) ids.push_back(batch.id);
  const torch::Tensor mine = torch::cat(ids);
  std::vector<std::int64_t> seen;
  for (const auto& part : acc.gather_object(std::vector<std::int64_t>(
           mine.data_ptr<std::int64_t>(), mine.data_ptr<std::int64_t>() + mine.numel())))
    seen.insert(seen.end(), part.begin(), part.end());
  std::sort(seen.begin(), seen.end());
  EXPECT(seen == all_ids(data));
}

// A kilobyte-granular line of /proc/self/status ("VmRSS:", "VmHWM:").
std::int64_t status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size()));
  throw std::runtime_error("no " + field + " in /proc/self/status");
}

// A corpus of 300 MB of uint16 token files (2 files a rank on 2 ranks), trained on by Ddp
// through 2 loader workers a rank: the resident memory stays flat over the run (sampled every
// 128 batches, none more than 16 MiB above the largest of the first quarter's) and its peak grows
// by far less than the corpus (the readers map the files and give passed pages back). A bound on
// measured memory rather than a limit: RLIMIT_AS counts the mapped files and libtorch's
// reservations, and Linux does not enforce RLIMIT_RSS.
void memory() {
  Accel acc(test_options());
  const int world = acc.num_processes();
  const fs::path folder = shared_folder(acc, "memory");
  const std::int64_t files = 2 * world, chunk = 1 << 20;  // a chunk: 2 MiB of tokens
  const std::int64_t chunks = 150 / files;                 // about 300 MB in all
  if (acc.is_main_process()) {
    std::vector<std::uint16_t> tokens(chunk);
    for (std::int64_t i = 0; i < chunk; ++i)
      tokens[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i % 50000);
    for (std::int64_t f = 0; f < files; ++f) {
      std::ofstream out(folder / fmt::format("shard_{}.bin", f), std::ios::binary);
      for (std::int64_t c = 0; c < chunks; ++c)
        out.write(reinterpret_cast<const char*>(tokens.data()), chunk * 2);
    }
  }
  acc.wait_for_everyone();
  const std::int64_t length = 1024;
  accel::StreamingLoader loader(accel::data::TokenFiles(folder, 2, length),
                                {.batch_size = 32, .shuffle_buffer = 16, .num_workers = 2});
  torch::manual_seed(3);
  torch::nn::Linear net(16, 1);
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer, batches] = acc.prepare(net, sgd, loader);
  const std::int64_t before = status_kib("VmRSS:");
  // This rank's 2 files, one a worker, each in batches of 32.
  const std::int64_t expected = 2 * (((chunks * chunk - 1) / length + 31) / 32);
  std::int64_t count = 0, early_kib = 0, late_kib = 0;
  double last_loss = 0;
  for (const auto& batch : batches) {
    const auto x = batch.input.narrow(1, 0, 16).to(torch::kFloat) / 50000;
    const auto y = batch.target.select(1, length - 1).to(torch::kFloat).unsqueeze(1) / 50000;
    const auto loss = torch::mse_loss(model(x), y);
    acc.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    last_loss = loss.item<double>();
    if (++count % 128 == 0) {
      std::int64_t& largest = 4 * count <= expected ? early_kib : late_kib;
      largest = std::max(largest, status_kib("VmRSS:"));
    }
  }
  const std::int64_t growth_mib = (status_kib("VmHWM:") - before) / 1024;
  acc.wait_for_everyone();
  if (acc.is_main_process()) fs::remove_all(folder);
  fmt::print("rank {}: {} batches; resident memory: largest {} MiB in the first quarter, {} MiB "
             "after it; peak {} MiB above the start; corpus 300 MB; last loss {:.4f}\n",
             acc.process_index(), count, early_kib / 1024, late_kib / 1024, growth_mib, last_loss);
  EXPECT(count == expected);
  EXPECT(early_kib > 0 && late_kib > 0);
  EXPECT(late_kib - early_kib < 16 * 1024);
  EXPECT(growth_mib < 64);
  EXPECT(std::isfinite(last_loss));
}

}  // namespace

int run(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"stream_resume", resume},
      {"stream_stop_at_first_end", [] { even_batches(accel::StreamEnd::stop_at_first_end); }},
      {"stream_wrap_around", [] { even_batches(accel::StreamEnd::wrap_around); }},
      {"stream_every_sample_once", every_sample_once},
      {"stream_memory", memory},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker_stream
