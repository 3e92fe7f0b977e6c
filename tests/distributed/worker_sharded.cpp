// The sharded strategies across processes: Zero2 and Fsdp<ShardGradOp> (gradients
// reduce-scattered, optimizer state sharded), Zero3 and Fsdp<FullShard> (parameters sharded too,
// in units; accel::Sharded blocks), Fsdp<HybridShard> (shards within a node; on one node here, on
// two through two_launchers.sh), and Fsdp<NoShard>. Training equal to one process's with every
// optimizer, accumulation, clipping, schedules and offloading; the memory accounting; what each
// holds when; overlap and prefetch; refusals; HybridShard's checkpoints.
#include "single_process.hpp"

#include <accel/checkpoints.hpp>
#include <accel/memory.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

using accel::testing::internals;

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_sharded {

namespace {

using accel_test::Ddp;
using accel_test::ddp_frozen;
using accel_test::ddp_matches_single_process;
using accel_test::expect_error;
using accel_test::expect_matches_reference;
using accel_test::gan_accumulation;
using accel_test::Regression;
using accel_test::test_options;

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
  if constexpr (requires { internals(acc).strategy().node_group(); })
    if (const auto* node = internals(acc).strategy().node_group()) return node->size();
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
  expect_matches_reference(acc, net, *reference);

  EXPECT(norms.size() == reference_norms.size());
  for (std::size_t i = 0; i < norms.size(); ++i)
    EXPECT(std::abs(norms[i] - reference_norms[i]) <= 1e-5 * reference_norms[i]);
  // Clipping must have acted for the comparison to mean anything.
  if (run.clip > 0) EXPECT(*std::max_element(norms.begin(), norms.end()) > run.clip);

  // Optimizer state: the user's optimizer holds none; the shard optimizer's covers this rank's
  // shard, and the ranks' together cover every trainable element once.
  EXPECT(user_optimizer.state().empty());
  const auto* shard = internals(acc).strategy().shard_optimizer(user_optimizer);
  EXPECT(shard != nullptr);
  const std::int64_t mine = state_numel(*shard);
  // One flat parameter per bucket (Zero2: the model is one bucket, unless a bucket per
  // parameter) or per unit (Zero3: each Linear of the Sequential), each padded to a multiple of
  // the world size.
  // Fsdp<HybridShard> on several nodes: padded to a multiple of a node's ranks, each node
  // holding one copy of the shards.
  const auto& flats = internals(acc).strategy().flat_parameters();
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
// The root-unit warning (Zero3's prepare, rank 0): none for a Sequential whose 2.1M parameters
// all sit in its children's units; one for a 1.1M-parameter Linear, all of it root. CMake checks
// the output (a model's units were once put to rest before the total was counted, so every
// model with units was said to be 100% root).
void zero3_root_warning() {
  Zero3 acc(accel_test::test_options());
  torch::nn::Sequential blocks(torch::nn::Linear(1024, 1024), torch::nn::Linear(1024, 1024));
  torch::nn::Linear flat(1100, 1000);
  auto [prepared_blocks, prepared_flat] = acc.prepare(blocks, flat);
  EXPECT(internals(acc).strategy().unit_count() >= 3);
}

// Two windows of 3 micro-steps: no communication before a window's last micro-step, then one
// reduce-scatter (one flat parameter), and in the first window also the one all-reduce in which
// the ranks learn that every parameter has had a gradient (docs/concepts/strategies.md, "Parameters
// without gradients"), never again after; the step all-gathers once.
template <class Accel>
void zero2_no_sync() {
  Accel acc(test_options());
  torch::manual_seed(3);
  auto net = padded_model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  const Regression data;
  auto& group = *internals(acc).process_group();
  const torch::Tensor weight = net->parameters()[0];
  for (int window = 0; window < 2; ++window) {
    std::vector<std::uint64_t> issued;
    for (int micro = 0; micro < 3; ++micro) {
      const auto before = group.collectives_issued();
      acc.backward(torch::mse_loss(model(data.inputs), data.targets));
      issued.push_back(group.collectives_issued() - before);
      // Mid-window the full local gradient collects; once reduce-scattered it is released.
      EXPECT(weight.grad().defined() == (micro < 2));
    }
    const auto before = group.collectives_issued();
    optimizer.step();
    optimizer.zero_grad();
    const auto in_step = group.collectives_issued() - before;
    fmt::print("rank {}: window {}: collectives per micro-step {} {} {}, in the step {}\n",
               acc.process_index(), window, issued[0], issued[1], issued[2], in_step);
    EXPECT(issued[0] == 0 && issued[1] == 0);
    EXPECT(issued[2] == (window == 0 ? 2u : 1u));
    EXPECT(in_step == 1);  // one all-gather
  }
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
  const auto& strategy = internals(acc).strategy();
  const auto& flats = strategy.flat_parameters();
  EXPECT(flats.size() == 9);
  EXPECT(flats.back()->parameters().front().is_same(unused));  // the last bucket
  auto& group = *internals(acc).process_group();
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
  // 9 reduce-scatters, and the all-reduce in which the ranks learn which parameters have had a
  // gradient: `unused` never has, so they ask at every window's end.
  EXPECT(after == 10);
  EXPECT(holding_after == 0 && strategy.reduce_scatters_in_flight() == 0);
  // The unused parameter's shard gradient is zeros; the others hold the mean over the ranks.
  EXPECT(flats.back()->shard_gradient().abs().sum().item<double>() == 0.0);
  EXPECT(flats[1]->shard_gradient().abs().sum().item<double>() > 0.0);  // the last weight
  // No rank has had a gradient for `unused`: its pieces are not stepped, so the shard optimizer
  // keeps no state for them, as one process's Adam keeps none for a parameter without a .grad.
  optimizer.step();
  const auto& state = strategy.shard_optimizer(adam)->state();
  for (const auto& piece : flats.back()->pieces())
    EXPECT(state.count(accel::detail::optimizer_state_key(piece.data)) == 0);
  EXPECT(!state.empty());
}

// What Zero2 refuses, on every rank alike: an optimizer that already holds state (here it
// stepped on rank 0 only), and an optimizer parameter in no prepared model.
void zero2_refusals() {
  Zero2 acc(test_options());
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
  const auto* shard = internals(acc).strategy().shard_optimizer(adam);
  EXPECT(shard != nullptr && shard->param_groups().size() == 2);
  adam.add_param_group(torch::optim::OptimizerParamGroup(std::vector<torch::Tensor>{}));
  acc.backward(torch::mse_loss(third_model(data.inputs), data.targets));
  expect_error([&] { third_optimizer.step(); },
               "Zero2: the torch::optim::Adam had 2 param groups of 4 parameters when it first "
               "stepped and has 3 of 4 now");
}

// --- Zero3, Fsdp<FullShard> and Fsdp<HybridShard>: parameters sharded too, in units --------------

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
  const auto& flats = internals(acc).strategy().flat_parameters();
  EXPECT(internals(acc).strategy().unit_count() == 4);  // three blocks, then the root
  EXPECT(flats.size() == 4);
  for (std::size_t b = 0; b < 3; ++b) EXPECT(flats[b]->layout().numel == 6 * 6 + 6 + 6 + 6);
  const torch::Tensor loss = model(torch::randn({4, 5})).pow(2).mean();
  for (std::size_t b = 0; b < 3; ++b) EXPECT(!flats[b]->materialized());
  EXPECT(flats[3]->materialized());
  acc.backward(loss);
  for (const auto& flat : flats) EXPECT(!flat->materialized() && !flat->gradient().defined());
  optimizer.step();
}

// Zero3 on CPU lends each unit the blocks the previous ones freed (parallel::detail::
// FlatBufferCache): once the first steps have made the blocks a step needs at once, a step
// takes no fresh memory for gathered units or full gradients, an evaluation between steps
// neither; a whole-model gather's blocks are freed when it ends.
void zero3_reuses_unit_buffers() {
  Zero3 acc(test_options());
  torch::manual_seed(1);
  auto net = list_model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  auto& cache = accel::parallel::detail::FlatBufferCache::instance();
  const auto start = cache.counts();  // other scenarios of a batch ran in this process before
  const auto step = [&] {
    acc.backward(model(torch::randn({4, 5})).pow(2).mean());
    optimizer.step();
    optimizer.zero_grad();
    torch::NoGradGuard no_grad;
    model(torch::randn({4, 5}));
  };
  for (int warm = 0; warm < 2; ++warm) step();
  const auto warmed = cache.counts();
  for (int more = 0; more < 3; ++more) step();
  const auto after = cache.counts();
  fmt::print("rank {}: zero3 unit buffers: {} fresh while warming, {} fresh and {} lent again in "
             "3 more steps, {} bytes kept\n",
             acc.process_index(), warmed.fresh_blocks - start.fresh_blocks,
             after.fresh_blocks - warmed.fresh_blocks,
             after.reused_blocks - warmed.reused_blocks, after.kept_bytes);
  EXPECT(after.fresh_blocks == warmed.fresh_blocks);
  // Each step: four units gathered and four full gradients in training, four units evaluating.
  EXPECT(after.reused_blocks - warmed.reused_blocks >= 3 * 12);
  // At most what one step had lent at once: a block and its gradient for each unit.
  std::size_t unit_bytes = 0;
  for (const auto& flat : internals(acc).strategy().flat_parameters())
    unit_bytes += static_cast<std::size_t>(flat->layout().padded_numel) * sizeof(float);
  EXPECT(after.kept_bytes <= 2 * unit_bytes);
  { const auto full = acc.full_parameters(net); }
  EXPECT(cache.counts().kept_bytes == 0);
}

// Options::sharded_communication: what crosses between the ranks is rounded to its dtype, and
// nothing else. Five SGD steps of the ModuleList model beside one process in fp32 on the global
// batch: within 1e-2 relative + 1e-3 of it (DdpWith's compression tolerance), yet further than
// 1e-5 from it, which fp32 communication stays within (it differs by ~1e-7, the order of the
// sums): the rounding happened. The same on every rank. Gathered in a narrower dtype, the root
// unit a forward computes with (gathered until its backward) holds values exact in that dtype,
// while the shards, the master weights, do not; full_parameters() gathers those.
template <class Par>
void narrow_communication(accel::ShardedCommunicationOptions communication,
                          bool shared_memory = true) {
  accel::Options options = test_options();
  options.sharded_communication = communication;
  options.shared_memory = shared_memory;
  accel::Accelerator<Par> acc(options);
  const int r = acc.process_index(), w = acc.num_processes();
  torch::manual_seed(3);
  auto net = list_model();
  torch::manual_seed(3);
  auto reference = list_model();
  const auto sgd_options = torch::optim::SGDOptions(0.05).momentum(0.9);
  torch::optim::SGD sgd(net->parameters(), sgd_options);
  torch::optim::SGD reference_sgd(reference->parameters(), sgd_options);
  auto [model, optimizer] = acc.prepare(net, sgd);
  const std::int64_t rows = 4;
  const torch::Tensor x = torch::randn({rows * w, 5}), y = torch::randn({rows * w, 1});
  const auto& flats = internals(acc).strategy().flat_parameters();
  const auto exact_in = [](const torch::Tensor& t, torch::Dtype wire) {
    return torch::equal(t, t.to(wire).to(t.scalar_type()));
  };
  constexpr bool gathers_units = accel::shards_parameters_v<Par>;
  for (int step = 0; step < 5; ++step) {
    const torch::Tensor loss =
        torch::mse_loss(model(x.narrow(0, r * rows, rows)), y.narrow(0, r * rows, rows));
    if (gathers_units && communication.parameters) {
      EXPECT(flats.back()->materialized());
      EXPECT(exact_in(flats.back()->flat(), *communication.parameters));
    }
    acc.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    reference_sgd.step();
    reference_sgd.zero_grad();
  }
  if (gathers_units && communication.parameters) {
    bool master = false;
    for (const auto& flat : flats) master |= !exact_in(flat->shard(), *communication.parameters);
    EXPECT(master);
    // A forward leaves the root unit gathered through the narrow wire until its backward; full
    // parameters taken then must be the fp32 master (gathered again at full width), not the
    // rounded copy, and releasing them must not write the rounded values into the shards.
    const auto snapshot = [&] {
      std::vector<torch::Tensor> values;
      const auto full = acc.full_parameters(net);
      for (const auto& p : net->parameters()) values.push_back(p.detach().clone());
      return values;
    };
    const auto at_rest = snapshot();
    const torch::Tensor held = model(x.narrow(0, r * rows, rows));
    EXPECT(flats.back()->materialized());
    EXPECT(exact_in(flats.back()->flat(), *communication.parameters));
    const auto while_held = snapshot(), after = snapshot();
    for (std::size_t i = 0; i < at_rest.size(); ++i) {
      EXPECT(torch::equal(at_rest[i], while_held[i]));
      EXPECT(torch::equal(at_rest[i], after[i]));
    }
  }
  const auto full = acc.full_parameters(net);
  const auto mine = net->parameters(), theirs = reference->parameters();
  EXPECT(mine.size() == theirs.size());
  double worst = 0;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    EXPECT(torch::allclose(mine[i], theirs[i], 1e-2, 1e-3));
    worst = std::max(worst, (mine[i] - theirs[i]).abs().max().item<double>());
  }
  fmt::print("rank {}: {} with narrower communication: largest difference to single-process "
             "fp32 training {:.3g}\n",
             r, Par::name, worst);
  EXPECT(worst > 1e-5);
  const auto digests = acc.gather_object(accel::state::parameter_digest(*net));
  for (auto d : digests) EXPECT(d == digests.front());
}

// What Options::sharded_communication refuses, on every rank alike, naming the value.
void narrow_communication_refusals() {
  accel::Options wide = test_options();
  wide.sharded_communication.gradients = torch::kDouble;
  expect_error([&] { Zero3 refused(wide); },
               "Zero3: Options::sharded_communication.gradients is Double; the sharded "
               "strategies send torch::kBFloat16 or torch::kHalf");
  accel::Options narrow = test_options();
  narrow.sharded_communication.parameters = torch::kBFloat16;
  expect_error([&] { Zero2 refused(narrow); },
               "Zero2: Options::sharded_communication.parameters all-gathers parameters in a "
               "narrower dtype, and Zero2 keeps its full parameters between steps");
  expect_error([&] { accel::Accelerator<accel::Ddp> refused(narrow); },
               "use the policy DdpWith<CompressBf16>");
  // Without shared memory a CPU tensor travels through Gloo, which lacks bf16 on libtorch 1.13:
  // refused at the first gather. Where Gloo has it, bf16 trains through Gloo.
  if (!accel::detail::gloo_has_bf16) {
    narrow.shared_memory = false;
    Zero3 acc(narrow);
    torch::manual_seed(3);
    auto net = list_model();
    auto model = acc.prepare(net);
    expect_error([&] { model(torch::randn({4, 5})); },
                 "Zero3: Options::sharded_communication.parameters asks for BFloat16 on the wire, "
                 "and Gloo carries no BFloat16");
  } else {
    narrow_communication<accel::Zero3>({.parameters = torch::kBFloat16, .gradients = torch::kBFloat16},
                                       /*shared_memory=*/false);
  }
}

// What Zero3 holds when: units as docs/concepts/strategies.md lays them out, full parameters only while
// used.
template <class Accel>
void zero3_residency() {
  Accel acc(test_options());
  const int w = acc.num_processes();
  torch::manual_seed(1);
  auto net = units_model();
  torch::optim::Adam adam(net->parameters(), 0.01);
  auto [model, optimizer] = acc.prepare(net, adam);
  const auto& flats = internals(acc).strategy().flat_parameters();
  // body.0 (its bias; its weight is shared with the root), body.2, then the root.
  EXPECT(internals(acc).strategy().unit_count() == 3);
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

// Fsdp<HybridShard>: each node splits the shards among its ranks, every node holds the same
// ones; at rest a rank keeps 1/LOCAL_WORLD_SIZE of the parameters. On one node it is FullShard.
void hybrid_layout() {
  Hybrid acc(test_options());
  const int w = acc.num_processes(), s = shard_ranks(acc);
  const auto* node = internals(acc).strategy().node_group();
  EXPECT((node == nullptr) == (acc.num_processes() == s));
  if (node != nullptr) {
    EXPECT(node->uses_shared_memory());  // a node's ranks share a host
    EXPECT(node->rank() == acc.local_process_index());
    EXPECT(internals(acc).strategy().replica_group()->size() == w / s);
    EXPECT(internals(acc).strategy().replica_group()->rank() == acc.process_index() / s);
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
  for (const auto& flat : internals(acc).strategy().flat_parameters()) {
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

// A model that takes no part in a window (a GAN's generator during the discriminator's step) sends
// nothing: its units hold no gradient, so reduce-scattering them would only cost collectives.
// A backward through one of two prepared models issues as many collectives as through the same
// model prepared alone.
void zero3_idle_model_sends_nothing() {
  const auto backward_collectives = [](bool beside_another) {
    Zero3 acc(test_options());
    torch::manual_seed(1);
    auto net = units_model(), idle_net = units_model();
    torch::optim::SGD sgd(net->parameters(), 0.1), idle_sgd(idle_net->parameters(), 0.1);
    const auto& group = *internals(acc).process_group();
    const torch::Tensor x = torch::randn({6, 5}), y = torch::randn({6, 1});
    const auto issued_in_backward = [&](auto& model, const auto& optimizers) {
      const torch::Tensor loss = torch::mse_loss(model(x), y);
      const std::uint64_t before = group.collectives_issued();
      acc.backward(loss);
      const std::uint64_t issued = group.collectives_issued() - before;
      for (auto* optimizer : optimizers) {
        optimizer->step();
        optimizer->zero_grad();
      }
      return issued;
    };
    if (!beside_another) {
      auto [model, optimizer] = acc.prepare(net, sgd);
      return issued_in_backward(model, std::array{&optimizer});
    }
    auto [model, idle, optimizer, idle_optimizer] = acc.prepare(net, idle_net, sgd, idle_sgd);
    return issued_in_backward(model, std::array{&optimizer, &idle_optimizer});
  };
  const auto alone = backward_collectives(false), beside = backward_collectives(true);
  fmt::print("zero3: {} collectives in a backward through a model prepared alone, {} beside an "
             "idle one\n", alone, beside);
  EXPECT(alone == beside);
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
    for (const auto& flat : internals(acc).strategy().flat_parameters()) EXPECT(!flat->materialized());
    const std::uint64_t issued = internals(acc).process_group()->collectives_issued();
    const std::size_t prefetched = internals(acc).strategy().prefetches();
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

// --- The fused optimizer step (Options::fused_optimizer) against libtorch's own ------------------

// Four steps of SGD (Nesterov momentum, weight decay), Adam (weight decay) and AdamW, each over a
// padded_model of its own, under Accel with Options::fused_optimizer as given, each rank on its
// own batches; returns the three models' parameters, whole, in one tensor.
template <class Accel>
torch::Tensor train_three_optimizers(bool fused) {
  accel::Options options = test_options();
  options.fused_optimizer = fused;
  Accel acc(options);
  torch::manual_seed(11);
  auto sgd_net = padded_model(), adam_net = padded_model(), adamw_net = padded_model();
  using namespace torch::optim;
  SGD sgd(sgd_net->parameters(), SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01));
  Adam adam(adam_net->parameters(), AdamOptions(0.01).weight_decay(0.01));
  AdamW adamw(adamw_net->parameters(), AdamWOptions(0.01).weight_decay(0.1));
  auto [sgd_model, sgd_step, adam_model, adam_step, adamw_model, adamw_step] =
      acc.prepare(sgd_net, sgd, adam_net, adam, adamw_net, adamw);
  const std::int64_t before = accel::parallel::fused_steps_taken();
  torch::manual_seed(static_cast<std::uint64_t>(100 + acc.process_index()));
  constexpr int steps = 4;
  for (int step = 0; step < steps; ++step) {
    const torch::Tensor x = torch::randn({4, 5}), y = torch::randn({4, 1});
    // Each model's backward and step in turn, as a GAN's (a sharded window's gradients must be
    // applied before the next backward).
    acc.backward(torch::mse_loss(sgd_model(x), y));
    sgd_step.step();
    sgd_step.zero_grad();
    acc.backward(torch::mse_loss(adam_model(x), y));
    adam_step.step();
    adam_step.zero_grad();
    acc.backward(torch::mse_loss(adamw_model(x), y));
    adamw_step.step();
    adamw_step.zero_grad();
  }
  // Every step of the three went through the fused kernels, or none did.
  EXPECT(accel::parallel::fused_steps_taken() - before == (fused ? 3 * steps : 0));
  std::vector<torch::Tensor> parameters;
  for (auto* net : {&sgd_net, &adam_net, &adamw_net}) {
    const auto full = acc.full_parameters(*net);
    for (const auto& p : (*net)->parameters()) parameters.push_back(p.detach().flatten().clone());
  }
  return torch::cat(parameters);
}

// The fused step against libtorch's under Accel, on every rank: within 1e-6 relative (its
// contract is 1 ulp per step; on the machines measured it is bitwise, which the line printed
// says).
template <class Accel>
void fused_matches_libtorch(std::string_view name) {
  const torch::Tensor fused = train_three_optimizers<Accel>(true);
  const torch::Tensor libtorch = train_three_optimizers<Accel>(false);
  const double worst = ((fused - libtorch).abs().max() / libtorch.abs().max()).item<double>();
  const std::int64_t differing = fused.ne(libtorch).sum().item<std::int64_t>();
  fmt::print("{}: the fused optimizer step against libtorch's: {} of {} parameters differ, max "
             "relative difference {:.3g}\n",
             name, differing, fused.numel(), worst);
  EXPECT(fused.numel() == 3 * 43);
  EXPECT(worst <= 1e-6);
}

// clip_grad_norm over a list holding a parameter of no prepared model (a scale outside it): not
// sharded, each rank holds its gradient whole, and the norm counts it once, with the prepared
// model's reduce-scattered gradient, as one process would. Every rank has the same data, so one
// process's gradient is each rank's.
void zero2_clip_unprepared_parameter() {
  Zero2 acc(test_options());
  torch::manual_seed(1);
  auto net = padded_model();
  torch::optim::SGD user_optimizer(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, user_optimizer);
  const torch::Tensor scale = torch::full({3}, 2.0, torch::requires_grad());
  const torch::Tensor x = torch::linspace(-1, 1, 20).reshape({4, 5});
  const torch::Tensor y = torch::ones({4, 1});
  acc.backward(torch::mse_loss(model(x), y) + (scale * scale).sum());
  std::vector<torch::Tensor> listed = net->parameters();
  listed.push_back(scale);
  const double norm = acc.clip_grad_norm(listed, /*max_norm=*/1e9);

  torch::manual_seed(1);
  auto reference = padded_model();
  const torch::Tensor reference_scale = torch::full({3}, 2.0, torch::requires_grad());
  (torch::mse_loss(reference->forward(x), y) + (reference_scale * reference_scale).sum())
      .backward();
  std::vector<torch::Tensor> reference_listed = reference->parameters();
  reference_listed.push_back(reference_scale);
  const double expected = torch::nn::utils::clip_grad_norm_(reference_listed, 1e9);
  fmt::print("rank {}: norm {} (one process: {})\n", acc.process_index(), norm, expected);
  EXPECT(std::abs(norm - expected) <= 1e-5 * expected);
}

}  // namespace

int run(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
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
      {"zero3_sharded_blocks_residency", sharded_blocks_residency<Zero3>},
      {"zero3_reuses_unit_buffers", zero3_reuses_unit_buffers},
      {"zero3_bf16_communication",
       [] {
         narrow_communication<accel::Zero3>(
             {.parameters = torch::kBFloat16, .gradients = torch::kBFloat16});
       }},
      {"fsdp_full_shard_fp16_communication",
       [] {
         narrow_communication<accel::Fsdp<accel::FullShard>>(
             {.parameters = torch::kHalf, .gradients = torch::kHalf});
       }},
      {"zero2_bf16_gradients",
       [] { narrow_communication<accel::Zero2>({.gradients = torch::kBFloat16}); }},
      {"fsdp_hybrid_shard_fp16_gradients",
       [] { narrow_communication<accel::Fsdp<accel::HybridShard>>({.gradients = torch::kHalf}); }},
      {"narrow_communication_refusals", narrow_communication_refusals},
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
      {"zero3_idle_model_sends_nothing", zero3_idle_model_sends_nothing},
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
      {"zero2_clip_unprepared_parameter", zero2_clip_unprepared_parameter},
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
      {"raw_optimizer_zero3", raw_optimizer_zero3},
      {"zero3_root_warning", zero3_root_warning},
      {"fused_optimizer",
       [] {
         fused_matches_libtorch<Ddp>("Ddp");
         fused_matches_libtorch<Zero2>("Zero2");
         fused_matches_libtorch<Zero3>("Zero3");
       }},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker_sharded
