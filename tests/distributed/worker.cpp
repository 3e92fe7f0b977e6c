// One rank of a distributed test. Started on every rank (by accel-launch, or by hand with
// torchrun-style variables) with a scenario name; exits 0 when its checks pass on this rank,
// non-zero with a message naming the failed check otherwise.
//
// Ddp and what prepare() does for it: training equal to one process's, buckets, compression,
// unused and frozen parameters, buffers, several backward() per batch, an optimizer that stepped
// before prepare(), different models on different ranks, a stopped rank. The other areas have
// workers of their own: worker_collectives.cpp, worker_data.cpp, worker_sharded.cpp (Zero2, Zero3
// and Fsdp), and the worker_*.cpp beside them.
#include "single_process.hpp"
#include "user_strategy.hpp"

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

using accel::testing::internals;

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker {

namespace {

using accel_test::Ddp;
using accel_test::ddp_frozen;
using accel_test::ddp_matches_single_process;
using accel_test::gan_accumulation;
using accel_test::Regression;
using accel_test::regression_model;
using accel_test::test_options;
using accel_test::train_beside_single_process;

// The strategy of user_strategy.hpp under SGD, whose steps are proportional to the gradients
// (Adam's hardly move when every gradient is scaled): equal to one process's, so its gradients
// are the mean over the ranks, not their sum.
void user_strategy_sgd() {
  accel::Accelerator<accel_test::UnbucketedDdp, accel::Fp32> acc(test_options());
  const auto [net, reference] = train_beside_single_process(acc, [](const auto&) {});
  for (std::size_t i = 0; i < net->parameters().size(); ++i)
    EXPECT(torch::allclose(net->parameters()[i], reference->parameters()[i], 1e-5, 1e-6));
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
  auto& group = *internals(acc).process_group();
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

// Several buckets, gradients as bucket views or copies, and private buckets through c10d or
// through Gloo's registered buffers (small_bucket_kb) change nothing in the result.
void ddp_small_buckets(bool views, double small_bucket_kb) {
  accel::Options options = test_options();
  options.ddp.gradients_as_bucket_views = views;
  options.ddp.buckets_in_shared_memory = false;  // ddp_shared_buckets tests the default
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

// Whether `t`'s memory lies in one of accel's shared-memory segments (/proc/self/maps).
bool in_shared_segment(const torch::Tensor& t) {
  std::ifstream maps("/proc/self/maps");
  const auto address = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  for (std::string line; std::getline(maps, line);) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) == 2 && address >= begin &&
        address < end)
      return line.find("/accel-shm.") != std::string::npos;
  }
  return false;
}

// Buckets in shared memory (DdpOptions::buckets_in_shared_memory, the default on one host): with
// gradients as bucket views the gradients live in the segment every rank maps; several buckets,
// each all-reduced and averaged where it lies, train bitwise as private buckets copied through
// the transport do, and as one process within the suite's tolerance.
void ddp_shared_buckets(bool views) {
  std::vector<torch::Tensor> trained[2];
  for (const bool shared : {true, false}) {
    accel::Options options = test_options();
    options.ddp.gradients_as_bucket_views = views;
    options.ddp.first_bucket_mb = 0.00005;  // buckets of 68 and 160 bytes
    options.ddp.bucket_mb = 0.0001;
    options.ddp.buckets_in_shared_memory = shared;
    Ddp acc(options);
    bool every_gradient_shared = true, any_gradient_shared = false;
    const auto [net, reference] = train_beside_single_process(acc, [&](const auto& model) {
      for (const auto& p : model->parameters()) {
        every_gradient_shared = every_gradient_shared && in_shared_segment(p.grad());
        any_gradient_shared = any_gradient_shared || in_shared_segment(p.grad());
      }
    });
    EXPECT(shared && views ? every_gradient_shared : !any_gradient_shared);
    for (std::size_t i = 0; i < net->parameters().size(); ++i)
      EXPECT(torch::allclose(net->parameters()[i], reference->parameters()[i], 1e-5, 1e-6));
    for (const auto& p : net->parameters()) trained[shared ? 0 : 1].push_back(p.detach().clone());
  }
  for (std::size_t i = 0; i < trained[0].size(); ++i)
    EXPECT(torch::equal(trained[0][i], trained[1][i]));
}

// Buckets of 16 MiB per rank in shared memory: one step trains. small_dev_shm.sh runs it with a
// /dev/shm too small for them, where prepare() must fail saying why and what to do.
void ddp_large_buckets() {
  Ddp acc(test_options());
  torch::manual_seed(5);
  torch::nn::Linear net(2048, 2048);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  acc.backward(model(torch::ones({2, 2048})).square().mean());
  optimizer.step();
  EXPECT(in_shared_segment(net->weight.grad()));
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

// A parameter the loss never touches: named in the error, or, with find_unused_parameters, left
// without a gradient, as on one process (no rank ever had one for it).
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
  EXPECT(!net->unused->weight.grad().defined() && !net->unused->bias.grad().defined());
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

}  // namespace

int run(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"ddp", ddp_matches_single_process<Ddp>},
      {"ddp_accum",
       ddp_matches_single_process<accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>>>},
      {"ddp_users_own_optimizer", ddp_matches_single_process<Ddp, regression_model, true>},
      {"user_strategy",
       ddp_matches_single_process<accel::Accelerator<accel_test::UnbucketedDdp, accel::Fp32>>},
      {"user_strategy_sgd", user_strategy_sgd},
      {"user_strategy_accum",
       ddp_matches_single_process<
           accel::Accelerator<accel_test::UnbucketedDdp, accel::Fp32, accel::GradAccum<2>>>},
      {"ddp_no_sync", ddp_no_sync},
      {"ddp_small_buckets", [] { ddp_small_buckets(false, 0.0); }},
      {"ddp_bucket_views", [] { ddp_small_buckets(true, 0.0); }},
      {"ddp_mixed_buckets", [] { ddp_small_buckets(false, 0.1); }},
      {"ddp_mixed_views", [] { ddp_small_buckets(true, 0.1); }},
      {"ddp_shared_buckets", [] { ddp_shared_buckets(true); }},
      {"ddp_shared_buckets_copied", [] { ddp_shared_buckets(false); }},
      {"ddp_large_buckets", ddp_large_buckets},
      {"ddp_compress_fp16", ddp_compressed<accel::CompressFp16>},
      {"ddp_compress_bf16", ddp_compressed<accel::CompressBf16>},
      {"ddp_unused", [] { ddp_unused(false); }},
      {"ddp_find_unused", [] { ddp_unused(true); }},
      {"ddp_buffers", ddp_buffers},
      {"ddp_frozen_bias", [] { ddp_frozen(false, false); }},
      {"ddp_frozen_bias_find_unused", [] { ddp_frozen(true, false); }},
      {"ddp_frozen_layer", [] { ddp_frozen(false, true); }},
      {"ddp_frozen_layer_find_unused", [] { ddp_frozen(true, true); }},
      {"gan_accumulation", gan_accumulation<accel::Ddp>},
      {"prepare_after_steps", prepare_after_steps},
      {"different_models", different_models},
      {"stopped_rank", [] { stopped_rank(false); }},
      {"stopped_rank_in_backward", [] { stopped_rank(true); }},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker
