// The data loader across processes: gather_for_metrics with even and uneven batches,
// split_batches (a last batch smaller than the world size too) and skip_first_batches.
#include "single_process.hpp"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_data {

namespace {

using accel_test::Ddp;
using accel_test::Regression;
using accel_test::regression_model;
using accel_test::test_options;

struct Row {
  torch::Tensor id;
};
struct Ids {
  std::int64_t n;
  std::int64_t size() const { return n; }
  Row get(std::int64_t i) const { return {torch::tensor(i)}; }
};

// 10 samples, batch 3: gather_for_metrics returns each sample exactly once.
void metrics(bool even) {
  accel::Options options = test_options();
  options.even_batches = even;
  Ddp acc(options);
  const int w = acc.num_processes();
  accel::DataLoader loader(Ids{10}, {.batch_size = 3});
  auto batches = acc.prepare(loader);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> seen;
  std::int64_t count = 0;
  for (const auto& batch : batches) {
    ++count;
    if (even) seen.push_back(acc.gather_for_metrics(batch.id));
  }
  const auto counts = acc.gather_object(count);
  if (even) {
    for (auto c : counts) EXPECT(c == batches.size());  // the same on every rank
    auto all = std::get<0>(torch::sort(torch::cat(seen)));
    EXPECT(torch::equal(all, torch::arange(10)));
  } else {
    std::int64_t total = 0;
    for (auto c : counts) total += c;
    EXPECT(total == 4);  // 4 batches of the epoch, none repeated
    EXPECT(counts.front() == (w == 1 ? 4 : 4 / w + (4 % w > 0)));
  }
}

// split_batches: every rank takes a slice of every batch; skip_first_batches resumes mid-epoch.
void split_and_skip() {
  accel::Options options = test_options();
  options.split_batches = true;
  Ddp acc(options);
  const int w = acc.num_processes();
  accel::DataLoader loader(Ids{12}, {.batch_size = 6});
  auto batches = acc.prepare(loader);
  EXPECT(batches.size() == 2);  // every rank sees every batch
  std::vector<torch::Tensor> seen;
  for (const auto& batch : batches) seen.push_back(acc.gather(batch.id));
  EXPECT(torch::equal(torch::cat(seen), torch::arange(12)));

  accel::Options whole = test_options();
  Ddp acc2(whole);
  accel::DataLoader loader2(Ids{20}, {.batch_size = 2});
  auto batches2 = acc2.prepare(loader2);
  const auto full = batches2.size();
  batches2.skip_first_batches(2);
  std::int64_t count = 0, first = -1;
  for (const auto& batch : batches2) {
    if (first < 0) first = batch.id[0].item<std::int64_t>();
    ++count;
  }
  EXPECT(count == full - 2);
  EXPECT(first == 2 * (2 * w + acc2.process_index()));  // this rank's batch 2 of the epoch
}

// split_batches with a last batch smaller than the world size: as Accelerate does, the last
// batch is completed with the epoch's first samples, so no rank gets an empty slice, and the
// training equals one process stepping over the same global batches. Sample counts 1..9.
void split_uneven() {
  for (std::int64_t samples = 1; samples <= 9; ++samples) {
    accel::Options options = test_options();
    options.split_batches = true;
    Ddp acc(options);
    const int w = acc.num_processes();
    const std::int64_t batch_size = 2 * w;
    Regression data;
    data.inputs = data.inputs.narrow(0, 0, samples);
    data.targets = data.targets.narrow(0, 0, samples);
    torch::manual_seed(4);
    auto net = regression_model();
    torch::manual_seed(4);
    auto reference = regression_model();
    torch::optim::SGD sgd(net->parameters(), 0.1), reference_sgd(reference->parameters(), 0.1);
    accel::DataLoader loader(data, {.batch_size = batch_size});
    auto [model, optimizer, batches] = acc.prepare(net, sgd, loader);
    std::vector<torch::Tensor> seen;
    for (const auto& batch : batches) {
      EXPECT(batch.x.size(0) == 2);
      const auto loss = torch::mse_loss(model(batch.x), batch.y);
      EXPECT(std::isfinite(loss.item<double>()));
      acc.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
      seen.push_back(acc.gather_for_metrics(batch.x));
    }
    EXPECT(torch::equal(torch::cat(seen), data.inputs));  // every sample once, in order
    for (std::int64_t b = 0; b * batch_size < samples; ++b) {
      const auto rows = torch::arange(b * batch_size, (b + 1) * batch_size) % samples;
      torch::mse_loss(reference->forward(data.inputs.index({rows})), data.targets.index({rows}))
          .backward();
      reference_sgd.step();
      reference_sgd.zero_grad();
    }
    for (std::size_t i = 0; i < net->parameters().size(); ++i)
      EXPECT(torch::allclose(net->parameters()[i], reference->parameters()[i], 1e-5, 1e-6));
  }
  // A batch size the ranks cannot split evenly is refused, naming both numbers.
  accel::Options options = test_options();
  options.split_batches = true;
  Ddp acc(options);
  accel::DataLoader loader(Regression(), {.batch_size = 2 * acc.num_processes() + 1});
  try {
    (void)acc.prepare(loader);
  } catch (const accel::Error& error) {
    EXPECT(std::string(error.what()).find(fmt::format("batch_size is {}",
                                                      2 * acc.num_processes() + 1)) !=
           std::string::npos);
    return;
  }
  throw std::runtime_error("split_batches accepted a batch size the ranks cannot split evenly");
}

}  // namespace

int run(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"metrics_even", [] { metrics(true); }},
      {"metrics_uneven", [] { metrics(false); }},
      {"split_and_skip", split_and_skip},
      {"split_uneven", split_uneven},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker_data
