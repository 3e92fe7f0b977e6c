// Collation of user aggregates, to_device, and the loader's epochs and shuffles.
#include <accel/accelerator.hpp>
#include <accel/data/stream_files.hpp>
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_data {

namespace {

struct Inner {
  torch::Tensor mask;
  std::vector<torch::Tensor> extras;
};

struct Rich {
  torch::Tensor image;
  Inner inner;
  std::tuple<torch::Tensor, torch::Tensor> pair;
  std::optional<torch::Tensor> weight;
};

Rich rich_sample(float value, bool with_weight = true) {
  return {torch::full({2, 3}, value),
          {torch::full({4}, value), {torch::full({1}, value), torch::full({5}, value)}},
          {torch::tensor(value), torch::full({2}, value)},
          with_weight ? std::optional<torch::Tensor>(torch::tensor(value)) : std::nullopt};
}

// Sample i holds the number i, so batches show which samples they hold.
struct Numbers {
  std::int64_t n;
  std::int64_t size() const { return n; }
  struct Item {
    torch::Tensor value;
  };
  Item get(std::int64_t i) const { return {torch::tensor(i)}; }
};

std::vector<std::int64_t> values(const torch::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

}  // namespace

TEST_CASE("collate stacks every tensor of nested aggregates, vectors, tuples and optionals") {
  const std::vector<Rich> samples{rich_sample(1), rich_sample(2), rich_sample(3)};
  const Rich batch = accel::data::collate(std::span<const Rich>(samples));
  CHECK(batch.image.sizes() == torch::IntArrayRef{3, 2, 3});
  CHECK(batch.inner.mask.sizes() == torch::IntArrayRef{3, 4});
  REQUIRE(batch.inner.extras.size() == 2);
  CHECK(batch.inner.extras[1].sizes() == torch::IntArrayRef{3, 5});
  CHECK(std::get<0>(batch.pair).sizes() == torch::IntArrayRef{3});
  CHECK(torch::equal(std::get<0>(batch.pair), torch::tensor({1.f, 2.f, 3.f})));
  REQUIRE(batch.weight.has_value());
  CHECK(batch.weight->sizes() == torch::IntArrayRef{3});
}

TEST_CASE("collate rejects batches whose samples disagree, naming the counts") {
  std::vector<Rich> samples{rich_sample(1), rich_sample(2, /*with_weight=*/false)};
  CHECK_THROWS_WITH_AS(accel::data::collate(std::span<const Rich>(samples)),
                       doctest::Contains("set in 1 of 2 samples"), accel::Error);
  samples[1] = rich_sample(2);
  samples[1].inner.extras.pop_back();
  CHECK_THROWS_WITH_AS(accel::data::collate(std::span<const Rich>(samples)),
                       doctest::Contains("field sample.<1>.<1> has 2 elements in the first "
                                         "sample and 1 in another"),
                       accel::Error);
  // Tensors of different shapes: the field and both shapes, not torch's stack error.
  samples[1] = rich_sample(2);
  samples[1].inner.extras[1] = torch::zeros({6});
  CHECK_THROWS_WITH_AS(accel::data::collate(std::span<const Rich>(samples)),
                       doctest::Contains("field sample.<1>.<1>[1] is a Float tensor of shape [5] "
                                         "in the batch's first sample and a Float tensor of "
                                         "shape [6] in its sample 1"),
                       accel::Error);
}

TEST_CASE("to_device and map_tensors reach every tensor and keep the rest") {
  const Rich sample = rich_sample(4);
  const Rich moved = accel::data::to_device(sample, torch::Device(torch::kCPU));
  CHECK(torch::equal(moved.inner.extras[1], sample.inner.extras[1]));
  int count = 0;
  accel::data::for_each_tensor(sample, [&](const torch::Tensor&) { ++count; });
  CHECK(count == 7);
  const auto doubled =
      accel::data::map_tensors(sample, [](const torch::Tensor& t) { return t * 2; });
  CHECK(torch::equal(*doubled.weight, torch::tensor(8.f)));
  const std::pair<std::string, torch::Tensor> tagged{"kept", torch::ones({1})};
  CHECK(accel::data::map_tensors(tagged, [](const torch::Tensor& t) { return t + 1; }).first ==
        "kept");
}

TEST_CASE("loader length, last batch and drop_last") {
  accel::DataLoader keep(Numbers{10}, {.batch_size = 4});
  accel::DataLoader drop(Numbers{10}, {.batch_size = 4, .drop_last = true});
  CHECK(keep.size() == 3);
  CHECK(drop.size() == 2);
  std::vector<std::int64_t> sizes;
  for (const auto& batch : keep) sizes.push_back(batch.value.size(0));
  CHECK(sizes == std::vector<std::int64_t>{4, 4, 2});
  CHECK_THROWS_WITH_AS(accel::DataLoader(Numbers{3}, {.batch_size = 0}),
                       doctest::Contains("batch_size is 0"), accel::Error);
}

TEST_CASE("a batch size near INT64_MAX gives one batch, a negative dataset size is refused") {
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max() - 1;
  accel::DataLoader loader(Numbers{3}, {.batch_size = huge});
  CHECK(loader.size() == 1);
  std::vector<std::int64_t> sizes;
  for (const auto& batch : loader) sizes.push_back(batch.value.size(0));
  CHECK(sizes == std::vector<std::int64_t>{3});
  CHECK(accel::DataLoader(Numbers{3}, {.batch_size = huge, .drop_last = true}).size() == 0);
  CHECK_THROWS_WITH_AS(accel::DataLoader(Numbers{-4}, {.batch_size = 2}),
                       doctest::Contains("the dataset's size() is -4"), accel::Error);
}

TEST_CASE("shuffling is a seeded permutation that changes every epoch") {
  accel::DataLoader loader(Numbers{50}, {.batch_size = 50, .shuffle = true, .seed = 3});
  std::vector<std::vector<std::int64_t>> epochs;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : loader) epochs.push_back(values(batch.value));
  REQUIRE(epochs.size() == 2);
  CHECK(epochs[0] != epochs[1]);
  auto sorted = epochs[0];
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 50; ++i) CHECK(sorted[static_cast<std::size_t>(i)] == i);
  // The order depends on (seed, epoch) only: a second loader replays it.
  accel::DataLoader replay(Numbers{50}, {.batch_size = 50, .shuffle = true, .seed = 3});
  CHECK(values((*replay.begin()).value) == epochs[0]);
  replay.set_epoch(1);
  CHECK(values((*replay.begin()).value) == epochs[1]);
  accel::DataLoader other_seed(Numbers{50}, {.batch_size = 50, .shuffle = true, .seed = 4});
  CHECK(values((*other_seed.begin()).value) != epochs[0]);
}

TEST_CASE("a prepared loader yields batches on the accelerator's device") {
  accel::Accelerator<accel::Ddp> accelerator({.device = torch::Device(torch::kCPU)});
  accel::DataLoader loader(Numbers{5}, {.batch_size = 2});
  auto batches = accelerator.prepare(loader);
  CHECK(batches.size() == 3);
  std::int64_t total = 0;
  for (const auto& batch : batches) {
    CHECK(batch.value.device() == accelerator.device());
    total += batch.value.sum().item<std::int64_t>();
  }
  CHECK(total == 0 + 1 + 2 + 3 + 4);
}

TEST_CASE("a prepared loader whose epoch holds no batch is refused, not iterated silently") {
  accel::Accelerator<accel::Ddp> accelerator({.device = torch::Device(torch::kCPU)});
  accel::DataLoader small(Numbers{3}, {.batch_size = 4, .drop_last = true});
  accel::DataLoader empty(Numbers{0}, {.batch_size = 2});
  auto [small_batches, empty_batches] = accelerator.prepare(small, empty);
  CHECK_THROWS_WITH((void)small_batches.begin(),
                    doctest::Contains("prepared loader #1: an epoch of it holds no batch (3 samples, "
                                      "batch size 4, drop_last)"));
  CHECK_THROWS_WITH((void)empty_batches.begin(), doctest::Contains("prepared loader #2"));
  CHECK(accelerator.completed_steps() == 0);
}

TEST_CASE("a custom collate function builds batches of the user's own type") {
  struct Batch {
    torch::Tensor values;
    std::int64_t count;
  };
  auto concatenate = [](std::span<const Numbers::Item> samples) {
    std::vector<torch::Tensor> parts;
    for (const auto& sample : samples) parts.push_back(sample.value.unsqueeze(0));
    return Batch{torch::cat(parts), static_cast<std::int64_t>(samples.size())};
  };
  accel::DataLoader loader(Numbers{5}, {.batch_size = 3}, concatenate);
  std::vector<std::int64_t> counts;
  for (const auto& batch : loader) counts.push_back(batch.count);
  CHECK(counts == std::vector<std::int64_t>{3, 2});
  accel::Accelerator<accel::Ddp> accelerator;
  auto batches = accelerator.prepare(loader);
  CHECK((*batches.begin()).count == 3);
}

// --- Worker threads (LoaderOptions::num_workers) -------------------------------------------

namespace {

// Every batch of one iteration, as the sample numbers it holds.
template <class Range>
std::vector<std::vector<std::int64_t>> served(Range& range) {
  std::vector<std::vector<std::int64_t>> batches;
  for (const auto& batch : range) batches.push_back(values(batch.value));
  return batches;
}

// Numbers whose sample `bad` cannot be read; counts the get() calls, from any thread.
struct Flaky {
  std::int64_t n;
  std::int64_t bad = -1;
  std::shared_ptr<std::atomic<std::int64_t>> calls = std::make_shared<std::atomic<std::int64_t>>(0);
  std::int64_t size() const { return n; }
  Numbers::Item get(std::int64_t i) const {
    ++*calls;
    if (i == bad) throw std::runtime_error("sample " + std::to_string(i) + " is corrupt");
    return {torch::tensor(i)};
  }
};

}  // namespace

TEST_CASE("with num_workers 1, 2 and 3 the batches and their order are those of num_workers 0") {
  struct Case {
    std::int64_t samples, batch_size;
    bool shuffle, drop_last;
  };
  // Short last batches, drop_last, a batch larger than the epoch, an empty dataset.
  for (const Case c : {Case{10, 3, false, false}, Case{10, 3, true, false}, Case{10, 3, true, true},
                       Case{37, 4, true, false}, Case{5, 8, true, false},
                       Case{0, 2, true, false}}) {
    const accel::LoaderOptions base{.batch_size = c.batch_size, .shuffle = c.shuffle,
                                    .drop_last = c.drop_last, .seed = 11};
    accel::DataLoader reference(Numbers{c.samples}, base);
    const auto epoch0 = served(reference), epoch1 = served(reference);
    for (int workers : {1, 2, 3})
      for (int prefetch : {1, 2}) {
        CAPTURE(c.samples);
        CAPTURE(c.batch_size);
        CAPTURE(c.shuffle);
        CAPTURE(c.drop_last);
        CAPTURE(workers);
        CAPTURE(prefetch);
        auto options = base;
        options.num_workers = workers;
        options.prefetch_factor = prefetch;
        accel::DataLoader loader(Numbers{c.samples}, options);
        CHECK(served(loader) == epoch0);
        CHECK(served(loader) == epoch1);  // the next epoch, with its own shuffle
        // A short last batch completed with the epoch's first samples (split_batches).
        const auto order = loader.order(0);
        std::vector<std::int64_t> indices(static_cast<std::size_t>(loader.size()));
        std::iota(indices.begin(), indices.end(), std::int64_t{0});
        auto padded = loader.prefetch(order, indices, /*pad_to_full=*/true);
        REQUIRE(padded != nullptr);
        for (const std::int64_t index : indices)
          CHECK(values(padded->next().value) == values(reference.batch(order, index, true).value));
      }
  }
}

TEST_CASE("a prepared loader with workers serves the same batches, sharded and resumed") {
  accel::Accelerator<accel::Ddp> accelerator({.device = torch::Device(torch::kCPU)});
  const accel::LoaderOptions base{.batch_size = 3, .shuffle = true, .seed = 5};
  auto with_workers = base;
  with_workers.num_workers = 2;
  accel::DataLoader plain(Numbers{23}, base);
  accel::DataLoader threaded(Numbers{23}, with_workers);
  auto plain_batches = accelerator.prepare(plain);
  auto threaded_batches = accelerator.prepare(threaded);
  CHECK(served(threaded_batches) == served(plain_batches));
  // Resuming mid-epoch (as load_state() does): the same next batches.
  plain_batches.skip_first_batches(3);
  threaded_batches.skip_first_batches(3);
  const auto resumed = served(threaded_batches);
  CHECK(resumed.size() == 5);
  CHECK(resumed == served(plain_batches));
  // Rank 1 of 3, with wrap-around (even_batches) and with split_batches (a padded last batch):
  // the shards another process would take.
  using Prepared = decltype(plain_batches);
  for (const accel::data::Shard shard :
       {accel::data::Shard{.rank = 1, .world = 3},
        accel::data::Shard{.rank = 1, .world = 3, .split_batches = true}}) {
    CAPTURE(shard.split_batches);
    Prepared plain_shard(accel::testing::internals(accelerator).core(), &plain, 0, shard);
    Prepared threaded_shard(accel::testing::internals(accelerator).core(), &threaded, 1, shard);
    const auto expected = served(plain_shard);
    CHECK(expected.size() == static_cast<std::size_t>(plain_shard.size()));
    CHECK(served(threaded_shard) == expected);
  }
}

TEST_CASE("an exception in get() surfaces at the batch it belongs to, and the rest still come") {
  using Batches = std::vector<std::vector<std::int64_t>>;
  for (int workers : {0, 1, 2, 3}) {
    CAPTURE(workers);
    // Batch 2 holds samples 8..11, and sample 9 throws.
    accel::DataLoader loader(Flaky{.n = 20, .bad = 9},
                             {.batch_size = 4, .num_workers = workers, .prefetch_factor = 1});
    Batches batches;
    auto it = loader.begin();
    batches.push_back(values(it->value));
    ++it;
    batches.push_back(values(it->value));
    CHECK(batches == Batches{{0, 1, 2, 3}, {4, 5, 6, 7}});
    CHECK_THROWS_WITH_AS(++it, "sample 9 is corrupt", std::runtime_error);
    // As without workers, an iteration that goes on past it gets the batches after it.
    ++it;
    REQUIRE(it != loader.end());
    CHECK(values(it->value) == std::vector<std::int64_t>{12, 13, 14, 15});
    ++it;
    ++it;
    CHECK(it == loader.end());
    // The first batch, thrown from begin(); through a prepared loader too.
    accel::DataLoader first(Flaky{.n = 8, .bad = 2}, {.batch_size = 4, .num_workers = workers});
    CHECK_THROWS_WITH_AS(first.begin(), "sample 2 is corrupt", std::runtime_error);
    accel::Accelerator<accel::Ddp> accelerator({.device = torch::Device(torch::kCPU)});
    auto prepared = accelerator.prepare(loader);
    Batches before;
    CHECK_THROWS_WITH_AS(
        [&] {
          for (const auto& batch : prepared) before.push_back(values(batch.value));
        }(),
        "sample 9 is corrupt", std::runtime_error);
    CHECK(before == Batches{{0, 1, 2, 3}, {4, 5, 6, 7}});
  }
}

TEST_CASE("leaving a loop early stops the workers, which never run more than the queue ahead") {
  const Flaky dataset{.n = 1000};
  accel::DataLoader loader(dataset, {.batch_size = 1, .num_workers = 3, .prefetch_factor = 2});
  std::int64_t seen = 0;
  for (const auto& batch : loader) {
    (void)batch;
    if (++seen == 2) break;  // the iterator's destructor joins the workers
  }
  // Two batches served and at most 3 x 2 built ahead of the second: the bound on memory.
  CHECK(*dataset.calls <= 2 + 3 * 2);
  // The next iteration is the next epoch and runs to its end.
  CHECK(served(loader).size() == 1000);
  // Through a prepared loader, too; then an epoch left right after begin().
  accel::Accelerator<accel::Ddp> accelerator({.device = torch::Device(torch::kCPU)});
  auto batches = accelerator.prepare(loader);
  for (const auto& batch : batches) {
    (void)batch;
    break;
  }
  (void)batches.begin();
  CHECK(served(batches).size() == 1000);
}

TEST_CASE("bad worker and pinning options are refused, naming the value") {
  CHECK_THROWS_WITH_AS(accel::DataLoader(Numbers{3}, {.num_workers = -1}),
                       doctest::Contains("LoaderOptions::num_workers is -1"), accel::Error);
  CHECK_THROWS_WITH_AS(accel::DataLoader(Numbers{3}, {.num_workers = 2, .prefetch_factor = 0}),
                       doctest::Contains("LoaderOptions::prefetch_factor is 0; it must be at "
                                         "least 1"),
                       accel::Error);
  if (!torch::cuda::is_available()) {
    CHECK_THROWS_WITH_AS(accel::DataLoader(Numbers{3}, {.pin_memory = true}),
                         doctest::Contains("LoaderOptions::pin_memory is set, but torch sees no "
                                           "CUDA device"),
                         accel::Error);
  } else {
    accel::DataLoader pinned(Numbers{5}, {.batch_size = 2, .num_workers = 2, .pin_memory = true});
    for (const auto& batch : pinned) CHECK(batch.value.is_pinned());
  }
}

// TokenFiles' windows for each token width, with values that need the width (above 255 and
// 65535), and TextFiles' bytes: the tokens of a window are the file's, in order.
TEST_CASE("token files of 1, 2 and 4 bytes a token read back as their tokens") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / fmt::format("accel_token_files_{}", ::getpid());
  fs::remove_all(root);
  const std::vector<std::uint32_t> tokens = {7, 300, 70000, 65535, 0, 255, 256, 4000000000u, 9};
  constexpr std::int64_t length = 3;
  for (const int width : {1, 2, 4}) {
    CAPTURE(width);
    const fs::path folder = root / std::to_string(width);
    fs::create_directories(folder);
    std::vector<std::uint32_t> expected;
    {
      std::ofstream out(folder / "shard.bin", std::ios::binary);
      for (const std::uint32_t token : tokens) {
        const std::uint32_t kept = width == 4 ? token : token & ((1u << (8 * width)) - 1);
        expected.push_back(kept);
        out.write(reinterpret_cast<const char*>(&kept), width);  // little-endian hosts
      }
    }
    const accel::data::TokenFiles files(folder, width, length);
    auto reader = files.open(0, 0);
    for (std::int64_t window = 0; window < 2; ++window) {
      const auto sample = reader.next();
      REQUIRE(sample.has_value());
      for (std::int64_t i = 0; i < length; ++i) {
        const auto at = static_cast<std::size_t>(window * length + i);
        CHECK(sample->input[i].item<std::int64_t>() == expected[at]);
        CHECK(sample->target[i].item<std::int64_t>() == expected[at + 1]);
      }
    }
    CHECK_FALSE(reader.next().has_value());  // 9 tokens: two windows of 3 + 1
  }
  const fs::path text = root / "text";
  fs::create_directories(text);
  std::ofstream(text / "a.txt") << "\xff\x01" "abcdef";
  auto reader = accel::data::TextFiles(text, 2).open(0, 1);  // from the second window
  const auto sample = reader.next();
  REQUIRE(sample.has_value());
  CHECK(sample->input[0].item<std::int64_t>() == 'a');
  CHECK(sample->target[1].item<std::int64_t>() == 'c');
  const auto first = accel::data::TextFiles(text, 2).open(0, 0).next();
  REQUIRE(first.has_value());
  CHECK(first->input[0].item<std::int64_t>() == 255);  // a byte, never a negative char
  fs::remove_all(root);
}

}  // namespace unit_data
