// Collation of user aggregates, to_device, and the loader's epochs and shuffles.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

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

TEST_CASE("a batch size near INT64_MAX gives one batch; a negative dataset size is refused") {
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
