// One rank of a distributed test. Started on every rank (by accel-launch, or by hand with
// torchrun-style variables) with a scenario name; exits 0 when its checks pass on this rank,
// non-zero with a message naming the failed check otherwise.
#include "scenario.hpp"

#include <accel/checkpoints.hpp>
#include <accel/memory.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <unistd.h>

namespace {

using Ddp = accel::Accelerator<accel::Ddp, accel::Fp32>;

using accel_test::max_relative_difference;
using accel_test::test_options;

struct Pair {
  torch::Tensor a;
  std::vector<torch::Tensor> b;
};

void collectives() {
  Ddp acc(test_options());
  const int r = acc.process_index(), w = acc.num_processes();
  const double rf = r;

  // CPU tensors go through shared memory when every rank is on this host, unless
  // ACCEL_SHARED_MEMORY=0 (the dist.gloo_* tests) turns it off.
  const auto variable = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value == nullptr ? "" : value);
  };
  EXPECT(acc.process_group()->uses_shared_memory() ==
         (variable("ACCEL_SHARED_MEMORY") != "0" &&
          variable("LOCAL_WORLD_SIZE") == variable("WORLD_SIZE")));

  acc.wait_for_everyone();

  // broadcast of an aggregate: rank 0's values everywhere.
  const Pair mine{torch::full({2}, rf), {torch::full({3}, rf + 10)}};
  const Pair from_root = acc.broadcast(mine);
  EXPECT(torch::equal(from_root.a, torch::zeros({2})));
  EXPECT(torch::equal(from_root.b[0], torch::full({3}, 10.0)));
  EXPECT(torch::equal(acc.broadcast(torch::tensor({rf}), w - 1), torch::tensor({double(w - 1)})));

  // reduce: sum, mean, max, min of 0..w-1.
  const auto value = torch::tensor({rf, 1.0});
  EXPECT(torch::allclose(acc.reduce(value), torch::tensor({w * (w - 1) / 2.0, double(w)})));
  EXPECT(torch::allclose(acc.reduce(value, accel::ReduceOp::mean),
                         torch::tensor({(w - 1) / 2.0, 1.0})));
  EXPECT(torch::equal(acc.reduce(value, accel::ReduceOp::max), torch::tensor({w - 1.0, 1.0})));
  EXPECT(torch::equal(acc.reduce(value, accel::ReduceOp::min), torch::tensor({0.0, 1.0})));

  // gather: uneven first dimensions (rank r holds r+1 rows of value r), scalars one row each.
  const auto gathered = acc.gather(torch::full({r + 1, 2}, rf));
  EXPECT(gathered.size(0) == w * (w + 1) / 2);
  std::int64_t row = 0;
  for (int k = 0; k < w; ++k)
    for (int i = 0; i <= k; ++i, ++row) EXPECT(gathered[row][0].item<double>() == k);
  EXPECT(torch::equal(acc.gather(torch::tensor(rf)), torch::arange(w).to(torch::kDouble)));

  // gather_object: strings of different lengths, trivially copyable values, vectors.
  const auto names = acc.gather_object(std::string(static_cast<std::size_t>(r + 1), 'x'));
  EXPECT(static_cast<int>(names.size()) == w);
  for (int k = 0; k < w; ++k) EXPECT(names[static_cast<std::size_t>(k)].size() == std::size_t(k + 1));
  const auto ranks = acc.gather_object(r);
  for (int k = 0; k < w; ++k) EXPECT(ranks[static_cast<std::size_t>(k)] == k);
  const auto vectors = acc.gather_object(std::vector<float>(static_cast<std::size_t>(r), 1.5f));
  EXPECT(vectors[static_cast<std::size_t>(w - 1)].size() == std::size_t(w - 1));

  // pad_across_processes: to the longest, padding at the end or the front.
  const auto padded = acc.pad_across_processes(torch::ones({r + 1}), 0, -1.0);
  EXPECT(padded.size(0) == w);
  EXPECT(padded[w - 1].item<float>() == (r == w - 1 ? 1.0f : -1.0f));
  const auto front = acc.pad_across_processes(torch::ones({2, r + 1}), 1, 0.0, true);
  EXPECT(front.size(1) == w && front[0][w - 1].item<float>() == 1.0f);

  // split_between_processes: contiguous shares differing by at most one, covering everything.
  std::vector<int> items(10);
  for (int i = 0; i < 10; ++i) items[static_cast<std::size_t>(i)] = i;
  const auto share = acc.split_between_processes(items);
  const auto shares = acc.gather_object(std::vector<int>(share));
  std::vector<int> joined;
  for (const auto& s : shares) joined.insert(joined.end(), s.begin(), s.end());
  EXPECT(joined == items);
  const auto tensor_share = acc.split_between_processes(torch::arange(7));
  EXPECT(acc.gather(tensor_share).size(0) == 7);

  // Triggers: raised on the last rank, seen by all at the next check, then lowered.
  EXPECT(!acc.check_trigger());
  if (r == w - 1) acc.set_trigger();
  EXPECT(acc.check_trigger());
  EXPECT(!acc.check_trigger());

  // main_process_first: the main process writes before anyone else reads (in the launch's own
  // fresh rendezvous folder, so no earlier run's file can fake it).
  const char* run_dir = std::getenv("ACCEL_STORE_DIR");
  EXPECT(run_dir != nullptr);
  const auto marker = std::filesystem::path(run_dir) / "main_first";
  {
    auto first = acc.main_process_first();
    if (acc.is_main_process()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::ofstream(marker) << "written";
    } else {
      EXPECT(std::filesystem::exists(marker));
    }
  }
  acc.wait_for_everyone();
}

// The collective gap-fillers give the native ops' numbers; bf16 through the fp32 wire too.
void gap_filling() {
  Ddp acc(test_options());
  auto& group = *acc.process_group();
  const int r = acc.process_index(), w = acc.num_processes();
  const auto input = torch::arange(4 * w, torch::kFloat) * (r + 1);
  const auto chunk = torch::arange(4 * r, 4 * r + 4, torch::kFloat) * (w * (w + 1) / 2.0);
  const auto fallback = group.reduce_scatter_portable(input, accel::ReduceOp::sum);
  const auto native = group.reduce_scatter(input);
  EXPECT(torch::equal(fallback, chunk));
  EXPECT(torch::equal(native, fallback));
  EXPECT(torch::allclose(group.reduce_scatter(input, accel::ReduceOp::mean), chunk / w));
  const auto mine = torch::full({2, 3}, double(r));
  EXPECT(torch::equal(group.allgather_portable(mine), group.allgather(mine)));
  // allgather_into a flat buffer whose slot r is the input (as Zero2 gathers its shards), fp32
  // and bf16, native and fallback.
  for (const auto dtype : {torch::kFloat, torch::kBFloat16})
    for (const bool use_native : {true, false}) {
      torch::Tensor flat = torch::full({3 * w}, -1.0, dtype);
      flat.narrow(0, 3 * r, 3).copy_(torch::arange(3 * r, 3 * r + 3, torch::kFloat));
      if (use_native)
        group.allgather_into(flat, flat.narrow(0, 3 * r, 3));
      else
        group.allgather_into_portable(flat, flat.narrow(0, 3 * r, 3));
      EXPECT(torch::equal(flat.to(torch::kFloat), torch::arange(3 * w, torch::kFloat)));
    }
  // Larger than the fallbacks' piece (4 Mi elements per rank): moved in several pieces, the
  // last one short, with the same result as the native ops.
  {
    const std::int64_t per_rank = (std::int64_t{4} << 20) * 2 + 3;
    const auto big = torch::arange(per_rank * w, torch::kFloat).remainder(1000) * (r + 1);
    const auto summed = group.reduce_scatter_portable(big, accel::ReduceOp::sum);
    const auto expected = torch::arange(per_rank * r, per_rank * (r + 1), torch::kFloat)
                              .remainder(1000) * (w * (w + 1) / 2.0);
    EXPECT(torch::equal(summed, expected));
    torch::Tensor flat = torch::full({per_rank * w}, -1.0);
    flat.narrow(0, per_rank * r, per_rank).copy_(expected);
    group.allgather_into_portable(flat, flat.narrow(0, per_rank * r, per_rank));
    EXPECT(torch::equal(flat, torch::arange(per_rank * w, torch::kFloat).remainder(1000) *
                                  (w * (w + 1) / 2.0)));
  }
  // bf16: native on a wire that has it, through fp32 where it does not; same numbers.
  auto bf = torch::full({5}, 0.5 * (r + 1), torch::kBFloat16);
  group.allreduce(bf);
  EXPECT(bf.scalar_type() == torch::kBFloat16);
  EXPECT(torch::equal(bf.to(torch::kFloat), torch::full({5}, 0.25f * w * (w + 1))));
  const auto bf_parts = group.reduce_scatter(torch::ones({2 * w}, torch::kBFloat16));
  EXPECT(torch::equal(bf_parts.to(torch::kFloat), torch::full({2}, float(w))));
  fmt::print("rank {}: native reduce_scatter {}, allgather {}, bf16 allreduce {}\n", r,
             accel::detail::gloo_has_reduce_scatter_base, accel::detail::gloo_has_allgather_base,
             accel::detail::gloo_has_bf16);
}

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

// K Ddp steps on W ranks equal K single-process steps on the concatenated global batch.
struct Sample {
  torch::Tensor x, y;
};
struct Regression {
  torch::Tensor inputs, targets;
  Regression() {
    torch::manual_seed(99);
    inputs = torch::randn({96, 5});
    targets = inputs.matmul(torch::linspace(-1, 1, 5)).unsqueeze(1);
  }
  std::int64_t size() const { return inputs.size(0); }
  Sample get(std::int64_t i) const { return {inputs[i], targets[i]}; }
};

torch::nn::Sequential regression_model() {
  return torch::nn::Sequential(torch::nn::Linear(5, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
}

// make_model: any model of 5 inputs and 1 output; it is built twice from the same seed.
// users_own_optimizer: step and zero the torch optimizer itself, not prepare()'s handle (right
// under Ddp, whose gradients live in the parameters' .grad).
template <class Accel, auto make_model = regression_model, bool users_own_optimizer = false>
void ddp_matches_single_process() {
  Accel acc(test_options());
  const int w = acc.num_processes();
  const std::int64_t per_rank = 4;
  // Different initial weights on each rank: prepare must broadcast rank 0's.
  torch::manual_seed(static_cast<std::uint64_t>(1 + acc.process_index()));
  auto net = make_model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  accel::DataLoader loader(Regression(), {.batch_size = per_rank, .shuffle = true, .seed = 5});
  auto [model, optimizer, batches] = acc.prepare(net, adam, loader);
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : batches) {
      acc.backward(torch::mse_loss(model(batch.x), batch.y));
      if (users_own_optimizer && acc.sync_gradients()) {
        adam.step();
        adam.zero_grad();
      } else if (!users_own_optimizer) {
        optimizer.step();
        optimizer.zero_grad();
      }
    }

  // The reference: one process, the same initial weights (rank 0's), batches of W x per_rank
  // over the same epoch order, GradAccum matching the accelerator's.
  torch::manual_seed(1);
  auto reference = make_model();
  torch::optim::Adam reference_adam(reference->parameters(), 0.01);
  accel::DataLoader global(Regression(), {.batch_size = per_rank * w, .shuffle = true, .seed = 5});
  int micro = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::int64_t index = 0;
    const std::int64_t total = global.size();
    for (const auto& batch : global) {
      const int window = static_cast<int>(std::min<std::int64_t>(
          Accel::accumulation_steps, total - (index / Accel::accumulation_steps) * Accel::accumulation_steps));
      (torch::mse_loss(reference->forward(batch.x), batch.y) / window).backward();
      ++index;
      if (++micro == window) {
        reference_adam.step();
        reference_adam.zero_grad();
        micro = 0;
      }
    }
  }
  const auto full = acc.full_parameters(net);  // Zero3 gathers its shards; others: no-op
  const double worst = max_relative_difference(*net, *reference);
  fmt::print("rank {}: max relative difference to single-process training {:.3g}\n",
             acc.process_index(), worst);
  EXPECT(worst <= 1e-5);
  const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
  for (auto d : digests) EXPECT(d == digests.front());  // bitwise identical on every rank
}

// Non-final micro-steps communicate nothing; the final one one all-reduce per bucket.
void ddp_no_sync() {
  accel::Options options = test_options();
  options.ddp.first_bucket_mb = 0.00003;  // force buckets of 36, 32 and 160 bytes
  options.ddp.bucket_mb = 0.00003;
  accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<3>> acc(options);
  torch::manual_seed(3);
  auto net = regression_model();
  auto model = acc.prepare(net);
  const Regression data;
  auto& group = *acc.process_group();
  std::vector<std::uint64_t> issued;
  for (int micro = 0; micro < 3; ++micro) {
    const auto before = group.collectives_issued();
    acc.backward(torch::mse_loss(model(data.inputs), data.targets));
    issued.push_back(group.collectives_issued() - before);
  }
  fmt::print("rank {}: collectives per micro-step {} {} {}\n", acc.process_index(), issued[0],
             issued[1], issued[2]);
  EXPECT(issued[0] == 0 && issued[1] == 0);
  EXPECT(issued[2] >= 2);  // several buckets, each its own all-reduce
}

// 5 SGD steps of `acc` on this rank's rows beside 5 single-process steps on every rank's rows,
// from the same initial weights; after_backward(net) sees the averaged gradients of each step.
// before_prepare(model) runs on both models first (to freeze parameters, for instance).
template <class Accel, class AfterBackward, class BeforePrepare = void (*)(torch::nn::Sequential&)>
std::pair<torch::nn::Sequential, torch::nn::Sequential> train_beside_single_process(
    Accel& acc, AfterBackward&& after_backward,
    BeforePrepare before_prepare = [](torch::nn::Sequential&) {}) {
  torch::manual_seed(4);
  auto net = regression_model();
  torch::manual_seed(4);
  auto reference = regression_model();
  before_prepare(net);
  before_prepare(reference);
  torch::optim::SGD sgd(net->parameters(), 0.1), reference_sgd(reference->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  const Regression data;
  const int r = acc.process_index(), w = acc.num_processes();
  const auto rows = data.inputs.size(0) / w;
  for (int step = 0; step < 5; ++step) {
    acc.backward(torch::mse_loss(model(data.inputs.narrow(0, r * rows, rows)),
                                 data.targets.narrow(0, r * rows, rows)));
    after_backward(net);
    optimizer.step();
    optimizer.zero_grad();
    torch::mse_loss(reference->forward(data.inputs.narrow(0, 0, rows * w)),
                    data.targets.narrow(0, 0, rows * w)).backward();
    reference_sgd.step();
    reference_sgd.zero_grad();
  }
  return {net, reference};
}

// Several buckets, gradients as bucket views or copies, and buckets through c10d or through
// Gloo's registered buffers (small_bucket_kb) change nothing in the result.
void ddp_small_buckets(bool views, double small_bucket_kb) {
  accel::Options options = test_options();
  options.ddp.gradients_as_bucket_views = views;
  // Buckets of 68 and 160 bytes (a bucket closes once it reaches its cap): with small_bucket_kb
  // 0.1 the first is registered and the second goes through c10d; with 0 both go through c10d.
  options.ddp.first_bucket_mb = 0.00005;
  options.ddp.bucket_mb = 0.0001;
  options.ddp.small_bucket_kb = small_bucket_kb;
  Ddp acc(options);
  const auto [net, reference] = train_beside_single_process(acc, [](const auto&) {});
  for (std::size_t i = 0; i < net->parameters().size(); ++i)
    EXPECT(torch::allclose(net->parameters()[i], reference->parameters()[i], 1e-5, 1e-6));
  // With views, two parameters of one bucket have gradients in one storage.
  const auto& last = net->parameters();
  const bool shared = last[last.size() - 1].grad().storage().data() ==
                      last[last.size() - 2].grad().storage().data();
  EXPECT(shared == views);
}

// DdpWith<C>: gradients travel in C's dtype; the averaged gradients are exactly representable
// in it, and training stays close to single-process fp32 training.
template <class Compression>
void ddp_compressed() {
  using Accel = accel::Accelerator<accel::DdpWith<Compression>>;
  const auto wire = accel::precision::to_scalar_type(Compression::wire);
  if (wire == torch::kBFloat16 && !accel::detail::gloo_has_bf16) {
    try {
      Accel acc(test_options());
    } catch (const accel::Error& error) {
      EXPECT(std::string(error.what()).find("CompressBf16 needs bf16 all-reduce") !=
             std::string::npos);
      fmt::print("refused as expected: {}\n", error.what());
      return;
    }
    throw std::runtime_error("CompressBf16 was accepted on a Gloo without bf16");
  }
  Accel acc(test_options());
  const auto [net, reference] = train_beside_single_process(acc, [&](const auto& trained) {
    for (const auto& p : trained->parameters())
      EXPECT(torch::equal(p.grad(), p.grad().to(wire).to(torch::kFloat)));
  });
  for (std::size_t i = 0; i < net->parameters().size(); ++i)
    EXPECT(torch::allclose(net->parameters()[i], reference->parameters()[i], 1e-2, 1e-3));
  const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
  for (auto d : digests) EXPECT(d == digests.front());
}

struct TwoHeadsImpl : torch::nn::Module {
  torch::nn::Linear used{nullptr}, unused{nullptr};
  TwoHeadsImpl() {
    used = register_module("used", torch::nn::Linear(5, 1));
    unused = register_module("unused", torch::nn::Linear(5, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return used(x); }
};
TORCH_MODULE(TwoHeads);

// A parameter the loss never touches: named in the error, or zero with find_unused_parameters.
void ddp_unused(bool find_unused) {
  accel::Options options = test_options();
  options.ddp.find_unused_parameters = find_unused;
  Ddp acc(options);
  TwoHeads net;
  auto model = acc.prepare(net);
  const Regression data;
  try {
    acc.backward(torch::mse_loss(model(data.inputs), data.targets));
  } catch (const accel::Error& error) {
    const std::string what = error.what();
    EXPECT(!find_unused);
    EXPECT(what.find("parameter 'unused.weight' of prepared model #1 (") != std::string::npos ||
           what.find("parameter 'unused.bias' of prepared model #1 (") != std::string::npos);
    EXPECT(what.find("TwoHeadsImpl) got no gradient") != std::string::npos);
    EXPECT(what.find("find_unused_parameters") != std::string::npos);
    fmt::print("rank {} caught: {}\n", acc.process_index(), what);
    return;
  }
  EXPECT(find_unused);
  EXPECT(torch::equal(net->unused->weight.grad(), torch::zeros_like(net->unused->weight)));
  EXPECT(net->used->weight.grad().abs().sum().item<double>() > 0);
}

struct WithBufferImpl : torch::nn::Module {
  torch::nn::Linear linear{nullptr};
  torch::Tensor counter;
  double seen = -1;
  WithBufferImpl() {
    linear = register_module("linear", torch::nn::Linear(5, 1));
    counter = register_buffer("counter", torch::zeros({1}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    seen = counter.item<double>();
    return linear(x);
  }
};
TORCH_MODULE(WithBuffer);

// Buffers are broadcast from rank 0 before each forward.
void ddp_buffers() {
  Ddp acc(test_options());
  WithBuffer net;
  auto model = acc.prepare(net);
  {
    torch::NoGradGuard no_grad;
    net->counter.fill_(10.0 + acc.process_index());  // ranks drift apart
  }
  (void)model(torch::ones({2, 5}));
  EXPECT(net->seen == 10.0);
}

// Rank 0 and the others call different collectives: both fail naming both calls.
void mismatch() {
  Ddp acc(test_options());
  const int r = acc.process_index();
  try {
    acc.reduce(torch::ones({r == 0 ? 3 : 4}));
  } catch (const accel::Error& error) {
    const std::string what = error.what();
    EXPECT(what.find("mismatched collective") != std::string::npos);
    EXPECT(what.find("rank 0: allreduce") != std::string::npos);
    EXPECT(what.find("shape=3") != std::string::npos && what.find("shape=4") != std::string::npos);
    fmt::print("rank {} caught: {}\n", r, what);
    return;
  }
  throw std::runtime_error("the mismatched collective was not detected");
}

// The last rank stops itself; the others must fail with a timeout rather than hang.
// in_backward: the others wait in Ddp's gradient all-reduce (a registered small bucket), else
// in a barrier.
void stopped_rank(bool in_backward) {
  accel::Options options = test_options();
  options.timeout = std::chrono::seconds(3);
  options.check_collectives = !in_backward;  // else the fingerprint's c10d all-gather waits first
  Ddp acc(options);
  auto net = regression_model();
  auto model = acc.prepare(net);
  const Regression data;
  const auto step = [&] { acc.backward(torch::mse_loss(model(data.inputs), data.targets)); };
  step();
  if (acc.process_index() == acc.num_processes() - 1) raise(SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  try {
    if (in_backward)
      step();
    else
      acc.wait_for_everyone();
  } catch (const std::exception& error) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print(stderr, "rank {} timed out after {:.1f} s: {}\n", acc.process_index(), waited,
               error.what());
    std::exit(7);  // fail, so that the launcher brings the stopped rank down
  }
  throw std::runtime_error("the barrier returned although a rank is stopped");
}


// --- Issue cases: frozen parameters, several backwards per batch, uneven split batches, late prepare

// Fine-tuning with frozen parameters trains exactly like one process on the global batch:
// a frozen parameter is in no bucket, so nothing of another parameter's gradient is touched.
template <class Accel = Ddp>
void ddp_frozen(bool find_unused, bool whole_first_layer) {
  accel::Options options = test_options();
  options.ddp.find_unused_parameters = find_unused;
  Accel acc(options);
  const auto freeze = [&](torch::nn::Sequential& net) {
    auto first = net[0]->as<torch::nn::Linear>();
    first->bias.requires_grad_(false);
    if (whole_first_layer) first->weight.requires_grad_(false);
  };
  auto [net, reference] = train_beside_single_process(acc, [](const auto&) {}, freeze);
  for (std::size_t i = 0; i < net->parameters().size(); ++i)
    EXPECT(torch::allclose(net->parameters()[i], reference->parameters()[i], 1e-5, 1e-6));
  // Unfreezing after prepare() is refused rather than trained wrongly.
  net[0]->template as<torch::nn::Linear>()->bias.requires_grad_(true);
  auto model = acc.prepare(net);
  const Regression data;
  try {
    acc.backward(torch::mse_loss(model(data.inputs), data.targets));
  } catch (const accel::Error& error) {
    const std::string what = error.what();
    EXPECT(what.find("'0.bias'") != std::string::npos);
    EXPECT(what.find("requires_grad") != std::string::npos);
    return;
  }
  throw std::runtime_error("a parameter unfrozen after prepare() was accepted");
}

// A GAN: two models and two optimizers, two backward() per batch, GradAccum<2> over a prepared
// loader. A micro-step is a batch: both optimizers step once per window, and the parameters
// equal one process's on the global batch.
struct GanSample {
  torch::Tensor real, noise;
};
struct GanData {
  torch::Tensor real, noise;
  GanData() {
    torch::manual_seed(21);
    real = torch::randn({96, 5}) + 1.0;
    noise = torch::randn({96, 2});
  }
  std::int64_t size() const { return real.size(0); }
  GanSample get(std::int64_t i) const { return {real[i], noise[i]}; }
};

// Under Zero2 a model reached by both backward() calls of a micro-step (the discriminator) is
// reduce-scattered after each, and the optimizer state lives in the shard optimizers.
template <class Par>
void gan_accumulation() {
  using Accel = accel::Accelerator<Par, accel::Fp32, accel::GradAccum<2>>;
  Accel acc(test_options());
  const int w = acc.num_processes();
  const auto make = [](torch::nn::Linear& generator, torch::nn::Linear& discriminator) {
    torch::manual_seed(8);
    generator = torch::nn::Linear(2, 5);
    discriminator = torch::nn::Linear(5, 1);
  };
  // One GAN step on a batch, the same code for the accelerated and the reference run.
  const auto step = [](auto& g, auto& d, auto& g_opt, auto& d_opt, const GanSample& batch,
                       auto&& backward) {
    const auto ones = torch::ones({batch.real.size(0), 1});
    const auto fake = g(batch.noise);
    backward(torch::mse_loss(d(batch.real), ones) + torch::mse_loss(d(fake.detach()), 0 * ones));
    d_opt.step();
    d_opt.zero_grad();
    backward(torch::mse_loss(d(fake), ones));
    g_opt.step();
    g_opt.zero_grad();
  };

  torch::nn::Linear g_net{nullptr}, d_net{nullptr};
  make(g_net, d_net);
  torch::optim::Adam g_adam(g_net->parameters(), 0.01), d_adam(d_net->parameters(), 0.01);
  accel::DataLoader loader(GanData(), {.batch_size = 96 / (8 * w)});  // 8 batches per rank
  auto [g, d, g_opt, d_opt, batches] = acc.prepare(g_net, d_net, g_adam, d_adam, loader);
  EXPECT(batches.size() == 8);
  for (const auto& batch : batches)
    step(g, d, g_opt, d_opt, batch, [&](const torch::Tensor& loss) { acc.backward(loss); });
  const auto adam_steps = [&](torch::optim::Adam& adam) {
    const torch::optim::Optimizer* holder = &adam;
    if constexpr (Par::shards_optimizer_state) {
      EXPECT(adam.state().empty());
      holder = acc.strategy().shard_optimizer(adam);
      EXPECT(holder != nullptr);
    }
    EXPECT(!holder->state().empty());
    return static_cast<const torch::optim::AdamParamState&>(*holder->state().begin()->second).step();
  };
  fmt::print("rank {}: generator steps {}, discriminator steps {}\n", acc.process_index(),
             adam_steps(g_adam), adam_steps(d_adam));
  EXPECT(adam_steps(g_adam) == 4 && adam_steps(d_adam) == 4);

  // The reference: one process, batches of every rank's rows, windows of 2 by hand.
  torch::nn::Linear g_ref{nullptr}, d_ref{nullptr};
  make(g_ref, d_ref);
  torch::optim::Adam g_ref_adam(g_ref->parameters(), 0.01), d_ref_adam(d_ref->parameters(), 0.01);
  struct WindowEnd {
    torch::optim::Adam& adam;
    bool* at_end;
    void step() { if (*at_end) adam.step(); }
    void zero_grad() { if (*at_end) adam.zero_grad(); }
  };
  bool at_end = false;
  WindowEnd g_window{g_ref_adam, &at_end}, d_window{d_ref_adam, &at_end};
  accel::DataLoader global(GanData(), {.batch_size = 96 / 8});
  int index = 0;
  for (const auto& batch : global) {
    at_end = ++index % 2 == 0;
    step(g_ref, d_ref, g_window, d_window, batch,
         [](const torch::Tensor& loss) { (loss / 2).backward(); });
  }
  const auto full_g = acc.full_parameters(g_net);  // Zero3 gathers its shards; others: no-op
  const auto full_d = acc.full_parameters(d_net);
  for (auto* pair : {&g_net, &d_net}) {
    auto& ref = pair == &g_net ? g_ref : d_ref;
    for (std::size_t i = 0; i < (*pair)->parameters().size(); ++i)
      EXPECT(torch::allclose((*pair)->parameters()[i], ref->parameters()[i], 1e-4, 1e-5));
  }
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

// An optimizer that stepped before prepare() holds per-rank state: prepare() makes it rank 0's
// on every rank, so the ranks keep training the same model.
void prepare_after_steps() {
  Ddp acc(test_options());
  torch::manual_seed(4);
  auto net = regression_model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  const Regression data;
  const int r = acc.process_index();
  for (int i = 0; i < 3; ++i) {  // plain steps on rank-dependent rows
    torch::mse_loss(net->forward(data.inputs.narrow(0, 10 * r, 10)),
                    data.targets.narrow(0, 10 * r, 10)).backward();
    adam.step();
    adam.zero_grad();
  }
  auto [model, optimizer] = acc.prepare(net, adam);
  for (int i = 0; i < 3; ++i) {
    acc.backward(torch::mse_loss(model(data.inputs.narrow(0, 10 * r, 10)),
                                 data.targets.narrow(0, 10 * r, 10)));
    optimizer.step();
    optimizer.zero_grad();
  }
  const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
  for (auto digest : digests) EXPECT(digest == digests.front());
}

// --- Zero2 and Fsdp<ShardGradOp>: gradients reduce-scattered, optimizer state sharded ------------

// What a parallelism policy shards (Fsdp's constants are its sharding's).
template <class Par>
struct Sharding : Par {};
template <class S>
struct Sharding<accel::Fsdp<S>> : S {};

using Zero2 = accel::Accelerator<accel::Zero2>;
using Zero3 = accel::Accelerator<accel::Zero3>;
using Hybrid = accel::Accelerator<accel::Fsdp<accel::HybridShard>>;

// How many ranks split each shard: a node's under Fsdp<HybridShard> on several nodes, else all.
template <class Accel>
int shard_ranks(const Accel& acc) {
  if constexpr (requires { acc.strategy().node_group(); })
    if (const auto* node = acc.strategy().node_group()) return node->size();
  return acc.num_processes();
}

// 5 -> 6 -> 1: 43 parameters, a size that needs padding on 2 ranks (to 44) and on 3 (to 45);
// with the first bias frozen, 37 (to 38 and 39).
torch::nn::Sequential padded_model() {
  return torch::nn::Sequential(torch::nn::Linear(5, 6), torch::nn::Tanh(), torch::nn::Linear(6, 1));
}

// The optimizers Zero2 rebuilds over a shard, each with two param groups of different options
// (the second: another learning rate and weight decay), so that group options must reach the
// shard optimizer group by group.
template <class Optimizer, class GroupOptions>
Optimizer two_groups(torch::nn::Sequential& net, GroupOptions first, GroupOptions second) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(net[0]->parameters(), std::make_unique<GroupOptions>(first));
  groups.emplace_back(net[2]->parameters(), std::make_unique<GroupOptions>(second));
  return Optimizer(std::move(groups), first);
}
torch::optim::Adam make_adam(torch::nn::Sequential& net) {
  using O = torch::optim::AdamOptions;
  return two_groups<torch::optim::Adam>(net, O(0.01), O(0.02).weight_decay(0.01).amsgrad(true));
}
torch::optim::SGD make_sgd(torch::nn::Sequential& net) {
  using O = torch::optim::SGDOptions;
  return two_groups<torch::optim::SGD>(net, O(0.05).momentum(0.9),
                                       O(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
}
torch::optim::AdamW make_adamw(torch::nn::Sequential& net) {
  using O = torch::optim::AdamWOptions;
  return two_groups<torch::optim::AdamW>(net, O(0.01), O(0.02).weight_decay(0.1));
}
torch::optim::Adagrad make_adagrad(torch::nn::Sequential& net) {
  using O = torch::optim::AdagradOptions;
  return two_groups<torch::optim::Adagrad>(net, O(0.05), O(0.1).lr_decay(0.01).weight_decay(0.01));
}
torch::optim::RMSprop make_rmsprop(torch::nn::Sequential& net) {
  using O = torch::optim::RMSpropOptions;
  return two_groups<torch::optim::RMSprop>(net, O(0.01), O(0.005).momentum(0.5).centered(true));
}

// Elements of optimizer state per parameter element that `optimizer` keeps (one state tensor
// counted per parameter: exp_avg, momentum_buffer, sum, square_avg).
std::int64_t state_numel(const torch::optim::Optimizer& optimizer) {
  std::int64_t numel = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(state.get()))
      numel += s->exp_avg().numel();
    else if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state.get()))
      numel += s->exp_avg().numel();
    else if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state.get()))
      numel += s->momentum_buffer().numel();
    else if (const auto* s = dynamic_cast<const torch::optim::AdagradParamState*>(state.get()))
      numel += s->sum().numel();
    else if (const auto* s = dynamic_cast<const torch::optim::RMSpropParamState*>(state.get()))
      numel += s->square_avg().numel();
  }
  return numel;
}

struct ShardedRun {
  bool frozen_bias = false;
  double clip = 0.0;  // max_norm; 0: no clipping
  bool scheduler = false;
  bool bucket_per_parameter = false;  // Zero2: Options::zero2 caps small enough for that
  accel::OffloadOptions offload = {};
};

// Zero2's caps for a bucket per parameter: each closes at its first parameter.
constexpr accel::Zero2Options bucket_per_parameter{.first_bucket_mb = 1e-9, .bucket_mb = 1e-9};

// Two epochs of `Accel` on W ranks (4 samples each per batch, GradAccum from Accel) against one
// process on the global batch, from rank 0's initial weights: parameters within 1e-5 relative
// (the reduce-scatter sums in another order than one process's backward: ~1e-7 is measured),
// bitwise identical on every rank, clipped norms equal to one process's, and optimizer state
// cut into shards: summed over the ranks it covers each trainable element once, and each rank
// holds at most its shard (total/N up to padding).
template <class Accel, class MakeOptimizer>
void sharded_matches_single_process(MakeOptimizer make_optimizer, ShardedRun run = {}) {
  accel::Options options = test_options();
  if (run.bucket_per_parameter) options.zero2 = bucket_per_parameter;
  options.offload = run.offload;
  Accel acc(options);
  const int w = acc.num_processes();
  const std::int64_t per_rank = 4;
  const auto freeze = [&](torch::nn::Sequential& net) {
    if (run.frozen_bias) net[0]->as<torch::nn::Linear>()->bias.requires_grad_(false);
  };
  torch::manual_seed(static_cast<std::uint64_t>(1 + acc.process_index()));
  auto net = padded_model();
  freeze(net);
  std::int64_t trainable = 0;
  for (const auto& p : net->parameters())
    if (p.requires_grad()) trainable += p.numel();
  auto user_optimizer = make_optimizer(net);
  torch::optim::StepLR user_schedule(user_optimizer, /*step_size=*/3, /*gamma=*/0.5);
  accel::DataLoader loader(Regression(), {.batch_size = per_rank, .shuffle = true, .seed = 5});
  auto [model, optimizer, scheduler, batches] = acc.prepare(net, user_optimizer, user_schedule, loader);
  std::vector<double> norms;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : batches) {
      acc.backward(torch::mse_loss(model(batch.x), batch.y));
      if (run.clip > 0) {
        const double norm = acc.clip_grad_norm(run.clip);
        if (acc.sync_gradients()) norms.push_back(norm);
      }
      optimizer.step();
      if (run.scheduler) scheduler.step();
      optimizer.zero_grad();
    }

  torch::manual_seed(1);
  auto reference = padded_model();
  freeze(reference);
  auto reference_optimizer = make_optimizer(reference);
  torch::optim::StepLR reference_schedule(reference_optimizer, 3, 0.5);
  accel::DataLoader global(Regression(), {.batch_size = per_rank * w, .shuffle = true, .seed = 5});
  std::vector<double> reference_norms;
  constexpr int steps = Accel::accumulation_steps;
  for (int epoch = 0; epoch < 2; ++epoch) {
    const std::int64_t total = global.size();
    std::int64_t index = 0;
    int micro = 0;
    for (const auto& batch : global) {
      const int window = static_cast<int>(std::min<std::int64_t>(steps, total - index / steps * steps));
      (torch::mse_loss(reference->forward(batch.x), batch.y) / window).backward();
      ++index;
      if (++micro < window) continue;
      micro = 0;
      if (run.clip > 0)
        reference_norms.push_back(
            torch::nn::utils::clip_grad_norm_(reference->parameters(), run.clip));
      reference_optimizer.step();
      if (run.scheduler) reference_schedule.step();
      reference_optimizer.zero_grad();
    }
  }

  // Zero3 keeps only shards between steps: the parameters are zero-element tensors until
  // gathered (a collective) for reading.
  if constexpr (Sharding<typename Accel::parallelism_policy>::shards_parameters)
    for (const auto& p : net->parameters()) EXPECT(p.requires_grad() ? p.numel() == 0 : p.numel() > 0);
  {
    const auto full = acc.full_parameters(net);
    const double worst = max_relative_difference(*net, *reference);
    fmt::print("rank {}: max relative difference to single-process training {:.3g}\n",
               acc.process_index(), worst);
    EXPECT(worst <= 1e-5);
    const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
    for (auto d : digests) EXPECT(d == digests.front());  // bitwise identical on every rank
  }

  EXPECT(norms.size() == reference_norms.size());
  for (std::size_t i = 0; i < norms.size(); ++i)
    EXPECT(std::abs(norms[i] - reference_norms[i]) <= 1e-5 * reference_norms[i]);
  // Clipping must have acted for the comparison to mean anything.
  if (run.clip > 0) EXPECT(*std::max_element(norms.begin(), norms.end()) > run.clip);

  // Optimizer state: the user's optimizer holds none; the shard optimizer's covers this rank's
  // shard, and the ranks' together cover every trainable element once.
  EXPECT(user_optimizer.state().empty());
  const auto* shard = acc.strategy().shard_optimizer(user_optimizer);
  EXPECT(shard != nullptr);
  const std::int64_t mine = state_numel(*shard);
  // One flat parameter per bucket (Zero2: the model is one bucket, unless a bucket per
  // parameter) or per unit (Zero3: each Linear of the Sequential), each padded to a multiple of
  // the world size.
  // Fsdp<HybridShard> on several nodes: padded to a multiple of a node's ranks, each node
  // holding one copy of the shards.
  const auto& flats = acc.strategy().flat_parameters();
  const std::size_t trainable_tensors = net->parameters().size() - (run.frozen_bias ? 1 : 0);
  EXPECT(flats.size() == (Sharding<typename Accel::parallelism_policy>::shards_parameters ? 2
                          : run.bucket_per_parameter                                      ? trainable_tensors
                                                                                          : 1));
  const int s = shard_ranks(acc), nodes = w / s;
  std::int64_t flat_numel = 0, shard_numel = 0;
  for (const auto& flat : flats) {
    flat_numel += flat->layout().numel;
    shard_numel += flat->layout().shard_numel;
    EXPECT(flat->layout().shard_numel == (flat->layout().numel + s - 1) / s);
  }
  EXPECT(flat_numel == trainable);
  EXPECT(mine <= shard_numel);
  const auto all = acc.gather_object(mine);
  std::int64_t sum = 0;
  for (auto n : all) sum += n;
  fmt::print("rank {}: optimizer state elements {} of {} (shard {})\n", acc.process_index(), mine,
             trainable, shard_numel);
  EXPECT(sum == trainable * nodes);

  // memory_use(): the ZeRO accounting. Summed over the ranks, the optimizer state is the
  // one-process optimizer's (each element kept once), the gradients are the padded flat
  // gradient once (after zero_grad, shards only); the parameters are the padded flat buffer
  // on every rank (Zero2) or once over the ranks (Zero3), plus a frozen parameter on every rank.
  accel::state::MemoryCounter one_process;
  one_process.optimizer_state(reference_optimizer);
  std::int64_t frozen_bytes = 0;
  for (const auto& p : reference->parameters())
    if (!p.requires_grad()) frozen_bytes += p.numel() * 4;
  const accel::MemoryUse use = acc.memory_use();
  const auto uses = acc.gather_object(
      std::array{use.parameters, use.gradients, use.optimizer_state, use.offloaded});
  std::int64_t parameters = 0, gradients = 0, state = 0, offloaded = 0;
  for (const auto& u : uses) {
    parameters += u[0];
    gradients += u[1];
    state += u[2];
    offloaded += u[3];
  }
  const std::int64_t padded_bytes = 4 * shard_numel * s;
  fmt::print("rank {}: memory_use parameters {} gradients {} optimizer_state {} offloaded {} bytes\n",
             acc.process_index(), use.parameters, use.gradients, use.optimizer_state, use.offloaded);
  const std::int64_t one_process_state = one_process.use().optimizer_state;
  // Offloaded to the CPU: the optimizer state, and either the CPU copies of the pieces with their
  // gradients (offload.optimizer: each trainable element once per node) or the padded shards
  // with theirs (offload.parameters), which then leave the device.
  if (run.offload.parameters) {
    EXPECT(state == 0 && gradients == 0);
    EXPECT(offloaded == nodes * (one_process_state + 2 * padded_bytes));
    EXPECT(parameters == w * frozen_bytes);
    return;
  }
  EXPECT(state == (run.offload.optimizer ? 0 : nodes * one_process_state));
  EXPECT(offloaded == (run.offload.optimizer ? nodes * (one_process_state + 8 * trainable) : 0));
  EXPECT(gradients == nodes * padded_bytes);
  if constexpr (Sharding<typename Accel::parallelism_policy>::shards_parameters)
    EXPECT(parameters == nodes * padded_bytes + w * frozen_bytes);
  else
    EXPECT(parameters == w * (padded_bytes + frozen_bytes));
  // The optimizer steps CPU copies, not the pieces of the device's shards.
  if (run.offload.optimizer)
    for (const auto& group : shard->param_groups())
      for (const auto& copy : group.params())
        for (const auto& flat : flats)
          EXPECT(copy.is_cpu() &&
                 copy.storage().unsafeGetStorageImpl() != flat->shard().storage().unsafeGetStorageImpl());
}

// Non-final micro-steps communicate nothing; the final one reduce-scatters once per flat
// parameter, after which the full gradients are released; the step all-gathers once.
template <class Accel>
void zero2_no_sync() {
  Accel acc(test_options());
  torch::manual_seed(3);
  auto net = padded_model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  const Regression data;
  auto& group = *acc.process_group();
  std::vector<std::uint64_t> issued;
  const torch::Tensor weight = net->parameters()[0];
  for (int micro = 0; micro < 3; ++micro) {
    const auto before = group.collectives_issued();
    acc.backward(torch::mse_loss(model(data.inputs), data.targets));
    issued.push_back(group.collectives_issued() - before);
    // Mid-window the full local gradient collects; once reduce-scattered it is released.
    EXPECT(weight.grad().defined() == (micro < 2));
  }
  const auto before = group.collectives_issued();
  optimizer.step();
  const auto in_step = group.collectives_issued() - before;
  fmt::print("rank {}: collectives per micro-step {} {} {}, in the step {}\n", acc.process_index(),
             issued[0], issued[1], issued[2], in_step);
  EXPECT(issued[0] == 0 && issued[1] == 0);
  EXPECT(issued[2] == 1);  // one flat parameter: one reduce-scatter
  EXPECT(in_step == 1);    // one all-gather
}

// An identity layer that calls `probe` when backward reaches its output.
struct ProbeImpl : torch::nn::Module {
  std::function<void()> probe;
  torch::Tensor forward(torch::Tensor x) {
    if (x.requires_grad())
      x.register_hook([this](const torch::Tensor&) {
        if (probe) probe();
      });
    return x;
  }
};
TORCH_MODULE(Probe);

// Zero2 with a bucket per parameter and two reduce-scatters in flight: they start during
// backward, in bucket order, and each bucket's full gradient is freed as its reduce-scatter lands;
// a parameter the loss does not reach (registered first, so its bucket comes last) is sent as
// zeros after backward. Checked where backward reaches the first layer's output: by then the
// three later layers' six gradients have arrived.
void zero2_overlap() {
  accel::Options options = test_options();
  options.zero2 = bucket_per_parameter;
  options.zero2.reduce_scatters_in_flight = 2;
  Zero2 acc(options);
  torch::manual_seed(3);
  Probe probe;
  torch::nn::Sequential net(torch::nn::Linear(5, 7), probe, torch::nn::Tanh(), torch::nn::Linear(7, 7),
                            torch::nn::Tanh(), torch::nn::Linear(7, 7), torch::nn::Tanh(),
                            torch::nn::Linear(7, 1));
  const torch::Tensor unused = net->register_parameter("unused", torch::ones({3}));
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  const auto& strategy = acc.strategy();
  const auto& flats = strategy.flat_parameters();
  EXPECT(flats.size() == 9);
  EXPECT(flats.back()->parameters().front().is_same(unused));  // the last bucket
  auto& group = *acc.process_group();
  std::uint64_t before = 0, at_probe = 0;
  std::size_t holding = 0, in_flight = 0;
  probe->probe = [&] {
    at_probe = group.collectives_issued() - before;
    in_flight = strategy.reduce_scatters_in_flight();
    for (const auto& flat : flats) holding += flat->gradient().defined() ? 1 : 0;
  };
  const Regression data;
  before = group.collectives_issued();
  acc.backward(torch::mse_loss(model(data.inputs), data.targets));
  const std::uint64_t after = group.collectives_issued() - before;
  std::size_t holding_after = 0;
  for (const auto& flat : flats) holding_after += flat->gradient().defined() ? 1 : 0;
  fmt::print("rank {}: reduce-scatters issued {} by the first layer, {} in all; full gradients "
             "held there {} ({} in flight), after backward {}\n",
             acc.process_index(), at_probe, after, holding, in_flight, holding_after);
  EXPECT(at_probe == 6);  // 6 issued while autograd ran the first layer's backward still ahead
  EXPECT(in_flight == 2 && holding == 2);  // the two in flight; the others freed or not arrived
  EXPECT(after == 9);
  EXPECT(holding_after == 0 && strategy.reduce_scatters_in_flight() == 0);
  // The unused parameter's shard gradient is zeros; the others hold the mean over the ranks.
  EXPECT(flats.back()->shard_gradient().abs().sum().item<double>() == 0.0);
  EXPECT(flats[1]->shard_gradient().abs().sum().item<double>() > 0.0);  // the last weight
  optimizer.step();
}

// What Zero2 refuses, on every rank alike: an optimizer that already holds state (here it
// stepped on rank 0 only), and an optimizer parameter in no prepared model.
void zero2_refusals() {
  Zero2 acc(test_options());
  const auto expect_error = [&](auto&& call, std::string_view needle) {
    try {
      call();
    } catch (const accel::Error& error) {
      const std::string what = error.what();
      if (what.find(needle) == std::string::npos)
        throw std::runtime_error(fmt::format("unexpected error: {}", what));
      return;
    }
    throw std::runtime_error(fmt::format("no error; expected '{}'", needle));
  };
  // Options::zero2 out of range: every rank has the same options, so every rank refuses.
  accel::Options no_flight = test_options();
  no_flight.zero2.reduce_scatters_in_flight = -1;
  expect_error([&] { Zero2 refused(no_flight); }, "reduce_scatters_in_flight -1");
  accel::Options offload_parameters = test_options();
  offload_parameters.offload.parameters = true;
  expect_error([&] { Zero2 refused(offload_parameters); },
               "Zero2: Options::offload.parameters keeps parameter shards on the CPU between uses, "
               "and Zero2 keeps every parameter whole on each rank");
  expect_error([&] { accel::Accelerator<accel::Ddp> refused(offload_parameters); },
               "Ddp: Options::offload moves optimizer state (and Zero3's parameter shards) to the "
               "CPU, and Ddp keeps them whole");
  const Regression data;
  torch::manual_seed(4);
  auto net = padded_model();
  torch::optim::Adam stepped(net->parameters(), 0.01);
  if (acc.process_index() == 0) {
    torch::mse_loss(net->forward(data.inputs), data.targets).backward();
    stepped.step();
    stepped.zero_grad();
  }
  expect_error([&] { acc.prepare(net, stepped); },
               "Zero2: the torch::optim::Adam passed to prepare() already holds optimizer state on "
               "at least one rank");

  auto other = padded_model();
  torch::Tensor stray = torch::zeros({3}, torch::requires_grad());
  torch::optim::SGD sgd(other->parameters(), 0.1);
  sgd.param_groups()[0].params().push_back(stray);
  auto [model, optimizer] = acc.prepare(other, sgd);
  acc.backward(torch::mse_loss(model(data.inputs), data.targets) + stray.sum());
  expect_error([&] { optimizer.step(); },
               "Zero2: parameter #4 of param group 0 of the optimizer (shape [3]) belongs to no "
               "prepared model");

  // A param group added after the first step has no shard: refused. One added before the first
  // step (after a zero_grad, which already located the optimizer's parameters) trains.
  auto third = padded_model();
  torch::optim::Adam adam(std::vector<torch::Tensor>{third[0]->parameters()}, 0.01);
  auto [third_model, third_optimizer] = acc.prepare(third, adam);
  third_optimizer.zero_grad();
  adam.add_param_group(torch::optim::OptimizerParamGroup(third[2]->parameters()));
  acc.backward(torch::mse_loss(third_model(data.inputs), data.targets));
  third_optimizer.step();
  third_optimizer.zero_grad();
  const auto* shard = acc.strategy().shard_optimizer(adam);
  EXPECT(shard != nullptr && shard->param_groups().size() == 2);
  adam.add_param_group(torch::optim::OptimizerParamGroup(std::vector<torch::Tensor>{}));
  acc.backward(torch::mse_loss(third_model(data.inputs), data.targets));
  expect_error([&] { third_optimizer.step(); },
               "Zero2: the torch::optim::Adam had 2 param groups of 4 parameters when it first "
               "stepped and has 3 of 4 now");
}

// --- Prompt, named failures ----------------------------------------------------------------------

// With collective checking off, the cheap checks still run where they cost no extra round trip:
// a broadcast carries the root's dtype and shape, a gather's row count carries the rest.
void unchecked_mismatch() {
  Ddp acc({.timeout = std::chrono::seconds(60)});  // check_collectives off
  const int r = acc.process_index();
  const auto expect_error = [&](auto&& call, std::string_view needle) {
    try {
      call();
    } catch (const accel::Error& error) {
      const std::string what = error.what();
      fmt::print("rank {} caught: {}\n", r, what);
      EXPECT(what.find(needle) != std::string::npos);
      return;
    }
    throw std::runtime_error(fmt::format("no error containing '{}'", needle));
  };
  // The same bytes, another shape: only the non-root ranks can see it.
  if (r == 0)
    (void)acc.broadcast(torch::zeros({2, 3}));
  else
    expect_error([&] { (void)acc.broadcast(torch::zeros({3, 2})); },
                 "the root sent a Float tensor of shape [2, 3]");
  // The same bytes, another dtype.
  if (r == 0)
    (void)acc.broadcast(torch::zeros({2}, torch::kLong));
  else
    expect_error([&] { (void)acc.broadcast(torch::zeros({4}, torch::kFloat)); },
                 "the root sent a Long tensor of shape [2]");
  // gather: another dtype or trailing shape on one rank fails on every rank, naming each.
  expect_error([&] { (void)acc.gather(torch::zeros({2, r == 0 ? 3 : 4})); },
               "rank 1: Float tensor of shape [rows, 4]");
  expect_error([&] { (void)acc.gather(torch::zeros({2}, r == 0 ? torch::kFloat : torch::kDouble)); },
               "rank 0: Float tensor of shape [rows, ]");
  // A mean of integers would round: refused on every rank before anything is sent.
  expect_error([&] { (void)acc.reduce(torch::ones({2}, torch::kLong), accel::ReduceOp::mean); },
               "a mean over the ranks of a Long tensor");
  acc.wait_for_everyone();
}

// Different byte counts reach Gloo, which stops the process from its own thread: the process
// must still say why, in an accel: line.
// On Gloo (the shared-memory path compares every call: shm_mismatched_reduce).
void gloo_abort() {
  Ddp acc({.timeout = std::chrono::seconds(20), .shared_memory = false});
  auto t = torch::ones({4}, acc.process_index() == 0 ? torch::kFloat : torch::kDouble);
  (void)acc.reduce(t);
  throw std::runtime_error("a reduce of 16 bytes against 32 bytes returned");
}

// The same mismatch through shared memory: every rank fails with an error naming both calls,
// nothing aborts.
void shm_mismatched_reduce() {
  Ddp acc({.timeout = std::chrono::seconds(20)});
  auto t = torch::ones({4}, acc.process_index() == 0 ? torch::kFloat : torch::kDouble);
  try {
    (void)acc.reduce(t);
  } catch (const accel::Error& error) {
    const std::string what = error.what();
    fmt::print("rank {} caught: {}\n", acc.process_index(), what);
    EXPECT(what.find("mismatched collective") != std::string::npos);
    EXPECT(what.find("(4 elements of float32)") != std::string::npos);
    EXPECT(what.find("(4 elements of float64)") != std::string::npos);
    return;
  }
  throw std::runtime_error("a reduce of 16 bytes against 32 bytes returned");
}

// Rank 1 freezes a bias that rank 0 trains: prepare() refuses on every rank, naming the
// parameter, instead of training different models (over Gloo, buckets of different sizes).
void different_models() {
  Ddp acc(test_options());
  torch::nn::Sequential net(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
  if (acc.process_index() == 1) net[0]->named_parameters()["bias"].set_requires_grad(false);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  throw std::runtime_error("prepare() accepted different models");
}

// The last rank leaves its Accelerator normally (it caught an error of its own and returns
// non-zero) while the others wait in a barrier: it must not hold them for long, and their error
// names the barrier and the rank that left.
void caught_error() {
  bool failed = false;
  {
    Ddp acc({.timeout = std::chrono::seconds(60)});
    if (acc.process_index() == acc.num_processes() - 1) {
      try {
        throw std::runtime_error("a user error, caught");
      } catch (const std::runtime_error&) {
        failed = true;
      }
    } else {
      acc.wait_for_everyone();
    }
  }
  if (failed) std::exit(3);
}

// A model cut into several Zero3 units: its own layers (the root unit), a Sequential body whose
// Linear children are units, and a weight the root shares with body[0] (so it is the root's),
// with sizes that need padding at 2 and 3 ranks.
struct UnitsNetImpl : torch::nn::Module {
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::Sequential body{nullptr};
  torch::Tensor shared;
  UnitsNetImpl()
      : in(register_module("in", torch::nn::Linear(5, 7))),
        out(register_module("out", torch::nn::Linear(7, 1))),
        body(register_module("body", torch::nn::Sequential(torch::nn::Linear(7, 7), torch::nn::Tanh(),
                                                           torch::nn::Linear(7, 7), torch::nn::Tanh()))) {
    shared = register_parameter("shared", body[0]->as<torch::nn::Linear>()->weight);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = torch::tanh(in(x));
    return out(body->forward(h) + 0.1 * torch::matmul(h, shared.t()));
  }
};
TORCH_MODULE(UnitsNet);
UnitsNet units_model() { return UnitsNet(); }

// A transformer's shape as C++ users write it: blocks in a ModuleList, each an accel::Sharded
// unit whose forward takes several arguments (a tensor mask, a number, a switch) and returns two
// tensors, both in the loss.
struct ListBlockImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc{nullptr};
  ListBlockImpl()
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({6})))),
        fc(register_module("fc", torch::nn::Linear(6, 6))) {}
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x, const torch::Tensor& mask,
                                                   double scale, bool residual) {
    const torch::Tensor h = torch::tanh(fc(norm(x))) * mask * scale;
    return {residual ? x + h : h, h.pow(2).mean(1, /*keepdim=*/true)};  // per sample
  }
};
TORCH_MODULE(ListBlock);

struct ListNetImpl : torch::nn::Module {
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  std::vector<accel::Sharded<ListBlock>> block;  // the same modules, typed for their forward
  ListNetImpl()
      : in(register_module("in", torch::nn::Linear(5, 6))),
        out(register_module("out", torch::nn::Linear(6, 1))),
        blocks(register_module("blocks", torch::nn::ModuleList())) {
    for (int i = 0; i < 3; ++i) {
      block.push_back(accel::Sharded<ListBlock>());
      blocks->push_back(block.back());
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = in(x), aux = torch::zeros({x.size(0), 1});
    const torch::Tensor mask = (torch::arange(6) % 3 != 0).to(torch::kFloat);
    for (std::size_t i = 0; i < block.size(); ++i) {
      auto [next, extra] = block[i](h, mask, 0.5 + 0.25 * static_cast<double>(i), i != 1);
      h = next;
      aux = aux + extra;
    }
    return out(h) + 0.01 * aux;
  }
};
TORCH_MODULE(ListNet);
ListNet list_model() { return ListNet(); }

// Each Sharded block is a unit of its own: freed after its forward, gathered again for its
// backward; the root (in, out) stays gathered from forward to backward.
template <class Accel>
void sharded_blocks_residency() {
  Accel acc(test_options());
  torch::manual_seed(1);
  auto net = list_model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  const auto& flats = acc.strategy().flat_parameters();
  EXPECT(acc.strategy().unit_count() == 4);  // three blocks, then the root
  EXPECT(flats.size() == 4);
  for (std::size_t b = 0; b < 3; ++b) EXPECT(flats[b]->layout().numel == 6 * 6 + 6 + 6 + 6);
  const torch::Tensor loss = model(torch::randn({4, 5})).pow(2).mean();
  for (std::size_t b = 0; b < 3; ++b) EXPECT(!flats[b]->materialized());
  EXPECT(flats[3]->materialized());
  acc.backward(loss);
  for (const auto& flat : flats) EXPECT(!flat->materialized() && !flat->gradient().defined());
  optimizer.step();
}

// What Zero3 holds when: units as docs/distributed.md lays them out, full parameters only while
// used.
template <class Accel>
void zero3_residency() {
  Accel acc(test_options());
  const int w = acc.num_processes();
  torch::manual_seed(1);
  auto net = units_model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  const auto& flats = acc.strategy().flat_parameters();
  // body.0 (its bias; its weight is shared with the root), body.2, then the root.
  EXPECT(acc.strategy().unit_count() == 3);
  EXPECT(flats.size() == 3);
  EXPECT(flats[0]->layout().numel == 7);
  EXPECT(flats[1]->layout().numel == 7 * 7 + 7);
  EXPECT(flats[2]->layout().numel == 7 * 5 + 7 + 7 + 1 + 7 * 7);
  const auto at_rest = [&] {
    for (const auto& flat : flats) {
      EXPECT(!flat->materialized());
      EXPECT(flat->shard().numel() == flat->layout().padded_numel / w);
      for (const auto& p : flat->parameters()) EXPECT(p.numel() == 0);
    }
  };
  at_rest();

  const torch::Tensor x = torch::randn({6, 5});  // the same on every rank (seed 1)
  const torch::Tensor y = torch::randn({6, 1});
  torch::Tensor expected;
  {
    const auto full = acc.full_parameters(net);
    for (const auto& flat : flats) EXPECT(flat->materialized());
    torch::NoGradGuard no_grad;
    expected = net->forward(x);  // the module itself, with every unit gathered
  }
  at_rest();
  {
    // Evaluation frees as it goes and leaves everything at rest.
    torch::NoGradGuard no_grad;
    EXPECT(torch::allclose(model(x), expected));
  }
  at_rest();
  // With a graph: the child units are freed after their forward (shapes kept for autograd), the
  // root stays gathered until its backward.
  const torch::Tensor loss = torch::mse_loss(model(x), y);
  EXPECT(!flats[0]->materialized() && !flats[1]->materialized() && flats[2]->materialized());
  EXPECT(flats[1]->parameters()[0].sizes() == torch::IntArrayRef({7, 7}));
  acc.backward(loss);
  at_rest();
  // The shard gradients hold this rank's part of the averaged gradient; the full ones are gone.
  for (const auto& flat : flats) {
    EXPECT(!flat->gradient().defined());
    EXPECT(flat->shard_gradient().abs().sum().template item<double>() > 0 || flat->layout().numel < w);
  }
  optimizer.step();
  at_rest();
}

// The last rank skips a collective and finishes normally; ACCEL_TIMEOUT (set by the test to 2 s)
// bounds the others' wait, and their error names the collective and the rank that left.
void skipped_collective() {
  Ddp acc({.timeout = std::chrono::minutes(30)});
  if (acc.process_index() != acc.num_processes() - 1) acc.wait_for_everyone();
}

// The wrong door under Zero3: the program steps the torch optimizer it built, not the one
// prepare() returned. On 2 processes that trains nothing; the next backward() stops it.
void raw_optimizer_zero3() {
  Zero3 acc(test_options());
  torch::manual_seed(3);
  torch::nn::Sequential net(torch::nn::Linear(16, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  for (int step = 0; step < 3; ++step) {
    acc.backward(model->forward(torch::ones({2, 16})).sum());
    adam.step();
    adam.zero_grad();
  }
  throw std::runtime_error("three steps of the raw optimizer ran under Zero3");
}

// The docs' own mistake: a save inside `if (is_main_process())`. Rank 0 enters save_state's
// collectives while rank 1 goes on to the next step's gradient all-reduce: both must fail within
// seconds (not the 30-minute timeout), naming save_state and what rank 1 called instead.
void save_in_main_process_only() {
  Ddp acc({.timeout = std::chrono::minutes(30)});
  torch::manual_seed(3);
  torch::nn::Linear net(16, 4);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  const auto folder = std::filesystem::temp_directory_path() /
                      fmt::format("accel-save-main-only-{}", ::getppid());
  for (int step = 0; step < 4; ++step) {
    const auto loss = model->forward(torch::ones({2, 16})).sum();
    acc.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (step == 1 && acc.is_main_process()) acc.save_state(folder);
  }
  throw std::runtime_error("a save on rank 0 alone returned on every rank");
}

// Fsdp<HybridShard>: each node splits the shards among its ranks, every node holds the same
// ones; at rest a rank keeps 1/LOCAL_WORLD_SIZE of the parameters. On one node it is FullShard.
void hybrid_layout() {
  Hybrid acc(test_options());
  const int w = acc.num_processes(), s = shard_ranks(acc);
  const auto* node = acc.strategy().node_group();
  EXPECT((node == nullptr) == (acc.num_processes() == s));
  if (node != nullptr) {
    EXPECT(node->uses_shared_memory());  // a node's ranks share a host
    EXPECT(node->rank() == acc.local_process_index());
    EXPECT(acc.strategy().replica_group()->size() == w / s);
    EXPECT(acc.strategy().replica_group()->rank() == acc.process_index() / s);
  }
  torch::manual_seed(1);
  auto net = units_model();
  // What estimate_memory says this rank will hold, against memory_use() below.
  const auto estimate = accel::estimate_memory<accel::Fsdp<accel::HybridShard>>(
      net, w, {.optimizer = accel::OptimizerKind::adam, .rank = acc.process_index(),
               .ranks_per_node = s});
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  const torch::Tensor x = torch::randn({6, 5}), y = torch::randn({6, 1});
  for (int step = 0; step < 2; ++step) {
    acc.backward(torch::mse_loss(model(x), y));
    optimizer.step();
    optimizer.zero_grad();
  }
  std::string shards;
  for (const auto& flat : acc.strategy().flat_parameters()) {
    EXPECT(!flat->materialized());
    EXPECT(flat->shard().numel() == flat->layout().padded_numel / s);
    shards += fmt::format("{:a} ", flat->shard().sum().item<double>());
  }
  const auto used = acc.memory_use();
  EXPECT(estimate.parameters == used.parameters);
  EXPECT(estimate.gradients == used.gradients);
  EXPECT(estimate.optimizer_state == used.optimizer_state);
  // The same shards on every node, different ones within a node.
  const auto all = acc.gather_object(shards);
  for (int r = 0; r < w; ++r) {
    EXPECT(all[static_cast<std::size_t>(r)] == all[static_cast<std::size_t>(r % s)]);
    if (r % s != 0) EXPECT(all[static_cast<std::size_t>(r)] != all[static_cast<std::size_t>(r - r % s)]);
  }
  fmt::print("rank {}: hybrid layout: {} ranks per shard, {} cop{} of the shards\n",
             acc.process_index(), s, w / s, w / s == 1 ? "y" : "ies");
}

// Zero3's prefetch (Options::prefetch_units): the next unit gathered while one runs (in backward
// the previous one) gives the same training, bitwise, with the same collectives, as gathering
// each unit when needed (the default).
void zero3_prefetch() {
  const auto run = [](bool prefetch) {
    accel::Options options = test_options();
    options.prefetch_units = prefetch;
    Zero3 acc(options);
    torch::manual_seed(1);
    auto net = units_model();
    torch::optim::Adam adam(net->parameters(), 0.01);
    auto [model, optimizer] = acc.prepare(net, adam);
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(static_cast<std::uint64_t>(50 + 10 * step + acc.process_index()));
      const torch::Tensor x = torch::randn({6, 5}), y = torch::randn({6, 1});
      acc.backward(torch::mse_loss(model(x), y));
      optimizer.step();
      optimizer.zero_grad();
      torch::NoGradGuard no_grad;  // an evaluation between steps
      model(x);
    }
    for (const auto& flat : acc.strategy().flat_parameters()) EXPECT(!flat->materialized());
    const std::uint64_t issued = acc.process_group()->collectives_issued();
    const std::size_t prefetched = acc.strategy().prefetches();
    const auto full = acc.full_parameters(net);
    return std::tuple{accel::state::parameter_digest(*net), issued, prefetched};
  };
  const auto [with, with_issued, with_prefetched] = run(true);
  const auto [without, without_issued, without_prefetched] = run(false);
  fmt::print("zero3 prefetch: {} units prefetched, {} collectives (without: {})\n",
             with_prefetched, with_issued, without_issued);
  EXPECT(with == without);
  EXPECT(with_issued == without_issued);
  // body.2 in each forward, body.0 in each backward: 3 x (2 + 1) at least.
  EXPECT(with_prefetched >= 9);
  EXPECT(without_prefetched == 0);
}

// Fsdp<HybridShard>'s checkpoints: the first node's ranks write the shards, every rank loads its
// own. Four steps straight against two, save, a new Accelerator loading, two more: bitwise.
void hybrid_checkpoint() {
  const char* port = std::getenv("MASTER_PORT");
  const std::filesystem::path folder = std::filesystem::temp_directory_path() /
                                       fmt::format("accel-hybrid-{}", port ? port : "local");
  const auto train = [](Hybrid& acc, auto& model, auto& optimizer, int first, int last) {
    for (int step = first; step < last; ++step) {
      torch::manual_seed(static_cast<std::uint64_t>(100 + 10 * step + acc.process_index()));
      const torch::Tensor x = torch::randn({4, 5}), y = torch::randn({4, 1});
      acc.backward(torch::mse_loss(model(x), y));
      optimizer.step();
      optimizer.zero_grad();
    }
  };
  const auto digest = [](Hybrid& acc, UnitsNet& net) {
    const auto full = acc.full_parameters(net);
    return accel::state::parameter_digest(*net);
  };
  const auto fresh = [] {
    torch::manual_seed(1);
    return units_model();
  };
  std::uint64_t straight = 0;
  {
    Hybrid acc(test_options());
    auto net = fresh();
    torch::optim::Adam adam(net->parameters(), 0.01);
    auto [model, optimizer] = acc.prepare(net, adam);
    train(acc, model, optimizer, 0, 4);
    straight = digest(acc, net);
  }
  {
    Hybrid acc(test_options());
    auto net = fresh();
    torch::optim::Adam adam(net->parameters(), 0.01);
    auto [model, optimizer] = acc.prepare(net, adam);
    train(acc, model, optimizer, 0, 2);
    acc.save_state(folder);
  }
  Hybrid acc(test_options());
  auto net = fresh();
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  acc.load_state(folder);
  train(acc, model, optimizer, 2, 4);
  EXPECT(digest(acc, net) == straight);
  acc.wait_for_everyone();
  if (acc.is_main_process()) std::filesystem::remove_all(folder);
}

}  // namespace

int main(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"collectives", collectives},
      {"gap_filling", gap_filling},
      {"metrics_even", [] { metrics(true); }},
      {"metrics_uneven", [] { metrics(false); }},
      {"split_and_skip", split_and_skip},
      {"ddp", ddp_matches_single_process<Ddp>},
      {"ddp_accum",
       ddp_matches_single_process<accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>>>},
      {"fsdp_no_shard", ddp_matches_single_process<accel::Accelerator<accel::Fsdp<accel::NoShard>>>},
      {"zero2", ddp_matches_single_process<Zero2>},
      {"zero2_accum",
       ddp_matches_single_process<accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<2>>>},
      {"fsdp_shard_grad_op",
       ddp_matches_single_process<accel::Accelerator<accel::Fsdp<accel::ShardGradOp>>>},
      {"zero3", ddp_matches_single_process<Zero3>},
      {"zero3_units", ddp_matches_single_process<Zero3, units_model>},
      {"zero3_sharded_blocks", ddp_matches_single_process<Zero3, list_model>},
      {"zero3_accum_sharded_blocks",
       ddp_matches_single_process<accel::Accelerator<accel::Zero3, accel::Fp32, accel::GradAccum<2>>,
                                  list_model>},
      {"fsdp_full_shard_sharded_blocks",
       ddp_matches_single_process<accel::Accelerator<accel::Fsdp<accel::FullShard>>, list_model>},
      {"ddp_sharded_blocks", ddp_matches_single_process<Ddp, list_model>},
      {"ddp_users_own_optimizer", ddp_matches_single_process<Ddp, regression_model, true>},
      {"zero3_sharded_blocks_residency", sharded_blocks_residency<Zero3>},
      {"zero3_accum",
       ddp_matches_single_process<accel::Accelerator<accel::Zero3, accel::Fp32, accel::GradAccum<2>>>},
      {"fsdp_full_shard", ddp_matches_single_process<accel::Accelerator<accel::Fsdp<accel::FullShard>>>},
      {"fsdp_hybrid_shard",
       [] {
         ddp_matches_single_process<Hybrid>();
         hybrid_layout();
       }},
      {"fsdp_hybrid_shard_checkpoint", hybrid_checkpoint},
      {"fsdp_hybrid_shard_offload",
       [] {
         sharded_matches_single_process<
             accel::Accelerator<accel::Fsdp<accel::HybridShard>, accel::Fp32, accel::GradAccum<2>>>(
             make_adam, {.clip = 0.05, .offload = {.parameters = true}});
       }},
      {"fsdp_hybrid_shard_accum_clip",
       [] {
         sharded_matches_single_process<
             accel::Accelerator<accel::Fsdp<accel::HybridShard>, accel::Fp32, accel::GradAccum<2>>>(
             make_sgd, {.frozen_bias = true, .clip = 0.05, .scheduler = true});
       }},
      {"zero3_residency", zero3_residency<Zero3>},
      {"zero3_prefetch", zero3_prefetch},
      {"zero3_sgd_momentum",
       [] { sharded_matches_single_process<Zero3>(make_sgd, {.scheduler = true}); }},
      {"zero3_adagrad", [] { sharded_matches_single_process<Zero3>(make_adagrad); }},
      {"zero3_accum_clip",
       [] {
         sharded_matches_single_process<
             accel::Accelerator<accel::Zero3, accel::Fp32, accel::GradAccum<2>>>(
             make_sgd, {.frozen_bias = true, .clip = 0.05, .scheduler = true});
       }},
      {"fsdp_full_shard_adam",
       [] {
         sharded_matches_single_process<accel::Accelerator<accel::Fsdp<accel::FullShard>>>(
             make_adam, {.clip = 0.05});
       }},
      {"zero3_gan_accumulation", gan_accumulation<accel::Zero3>},
      {"zero2_adam", [] { sharded_matches_single_process<Zero2>(make_adam); }},
      {"zero2_offload",
       [] {
         sharded_matches_single_process<
             accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<2>>>(
             make_adam, {.frozen_bias = true, .clip = 0.05, .scheduler = true,
                         .offload = {.optimizer = true}});
       }},
      {"zero3_offload_optimizer",
       [] {
         sharded_matches_single_process<Zero3>(make_adamw, {.clip = 0.05, .offload = {.optimizer = true}});
       }},
      {"zero3_offload_parameters",
       [] {
         sharded_matches_single_process<
             accel::Accelerator<accel::Zero3, accel::Fp32, accel::GradAccum<2>>>(
             make_adam, {.frozen_bias = true, .clip = 0.05, .scheduler = true,
                         .offload = {.parameters = true}});
       }},
      {"zero2_sgd_momentum",
       [] { sharded_matches_single_process<Zero2>(make_sgd, {.scheduler = true}); }},
      {"zero2_adamw", [] { sharded_matches_single_process<Zero2>(make_adamw); }},
      {"zero2_adagrad", [] { sharded_matches_single_process<Zero2>(make_adagrad); }},
      {"zero2_rmsprop", [] { sharded_matches_single_process<Zero2>(make_rmsprop); }},
      {"zero2_accum_adam",
       [] {
         sharded_matches_single_process<
             accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<2>>>(make_adam);
       }},
      {"zero2_frozen_bias",
       [] { sharded_matches_single_process<Zero2>(make_adam, {.frozen_bias = true}); }},
      {"zero2_clip", [] { sharded_matches_single_process<Zero2>(make_adam, {.clip = 0.05}); }},
      {"zero2_accum_clip",
       [] {
         sharded_matches_single_process<
             accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<2>>>(
             make_sgd, {.frozen_bias = true, .clip = 0.05, .scheduler = true});
       }},
      {"fsdp_shard_grad_op_adam",
       [] {
         sharded_matches_single_process<accel::Accelerator<accel::Fsdp<accel::ShardGradOp>>>(
             make_adam, {.clip = 0.05});
       }},
      {"zero2_no_sync", zero2_no_sync<accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<3>>>},
      {"zero2_frozen_layer", [] { ddp_frozen<Zero2>(false, true); }},
      {"zero2_unfrozen_bias", [] { ddp_frozen<Zero2>(false, false); }},
      {"ddp_no_sync", ddp_no_sync},
      {"ddp_small_buckets", [] { ddp_small_buckets(false, 0.0); }},
      {"ddp_bucket_views", [] { ddp_small_buckets(true, 0.0); }},
      {"ddp_mixed_buckets", [] { ddp_small_buckets(false, 0.1); }},
      {"ddp_mixed_views", [] { ddp_small_buckets(true, 0.1); }},
      {"ddp_compress_fp16", ddp_compressed<accel::CompressFp16>},
      {"ddp_compress_bf16", ddp_compressed<accel::CompressBf16>},
      {"ddp_unused", [] { ddp_unused(false); }},
      {"ddp_find_unused", [] { ddp_unused(true); }},
      {"ddp_buffers", ddp_buffers},
      {"mismatch", mismatch},
      {"ddp_frozen_bias", [] { ddp_frozen(false, false); }},
      {"ddp_frozen_bias_find_unused", [] { ddp_frozen(true, false); }},
      {"ddp_frozen_layer", [] { ddp_frozen(false, true); }},
      {"ddp_frozen_layer_find_unused", [] { ddp_frozen(true, true); }},
      {"gan_accumulation", gan_accumulation<accel::Ddp>},
      {"zero2_gan_accumulation", gan_accumulation<accel::Zero2>},
      {"zero2_refusals", zero2_refusals},
      {"zero2_overlap", zero2_overlap},
      {"zero2_bucket_per_parameter",
       [] { sharded_matches_single_process<Zero2>(make_adam, {.clip = 0.05, .bucket_per_parameter = true}); }},
      {"zero2_accum_bucket_per_parameter",
       [] {
         sharded_matches_single_process<accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<2>>>(
             make_adam, {.frozen_bias = true, .bucket_per_parameter = true});
       }},
      {"split_uneven", split_uneven},
      {"prepare_after_steps", prepare_after_steps},
      {"unchecked_mismatch", unchecked_mismatch},
      {"gloo_abort", gloo_abort},
      {"shm_mismatched_reduce", shm_mismatched_reduce},
      {"caught_error", caught_error},
      {"different_models", different_models},
      {"save_in_main_process_only", save_in_main_process_only},
      {"raw_optimizer_zero3", raw_optimizer_zero3},
      {"skipped_collective", skipped_collective},
      {"stopped_rank", [] { stopped_rank(false); }},
      {"stopped_rank_in_backward", [] { stopped_rank(true); }},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}
