// Data-dependent control flow across processes (docs/concepts/strategies.md, "Sharded units and
// data-dependent control flow", "Parameters without gradients"): each row of a batch is routed
// past one of a model's Sharded blocks (an MoE-like router), each rank's rows skip a different
// block of the same size, and a late block is used by no rank until a later step and then only
// now and then. Against one process on the global batch, under every strategy:
//   - Ddp (find_unused_parameters) and Zero2 let each rank skip blocks; Zero3 and Fsdp<FullShard>,
//     which gather a unit where the forward calls it, need every rank to call every block (here
//     on an empty slice of its rows) and match one process so;
//   - a Zero3 rank that skips a block others call is refused on every rank, before any step;
//   - a parameter no rank has had a gradient for is not stepped, as on one process, where its
//     .grad is undefined (AdamW's weight decay would otherwise move it).
#include "scenario.hpp"

#include <cstdint>
#include <string>
#include <vector>

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_routing {

namespace {

using accel_test::test_options;

constexpr std::int64_t width = 6, rows_per_rank = 4, blocks = 4;

// `gated` rows also pass through the gate, which is not called when there are none: a parameter
// of the unit that some ranks' backward reaches and others' does not, so the unit's backward
// finishes during autograd on some ranks and only after it on others.
struct RoutedBlockImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc{nullptr}, gate{nullptr};
  RoutedBlockImpl()
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        fc(register_module("fc", torch::nn::Linear(width, width))),
        gate(register_module("gate", torch::nn::Linear(width, width))) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& gated) {
    torch::Tensor h = x + torch::tanh(fc(norm(x)));
    if (gated.numel() == 0) return h;
    const torch::Tensor g = h.index_select(0, gated);
    return h.index_copy(0, gated, torch::sigmoid(gate(g)) * g);
  }
};
TORCH_MODULE(RoutedBlock);

// Blocks 0..3 routed by row (block b's gate for the rows that skip block b + 1), block 4 (the late
// one) applied to every row when asked; the gates of blocks 3 and 4 are never used.
struct RoutedNetImpl : torch::nn::Module {
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::ModuleList list{nullptr};
  std::vector<accel::Sharded<RoutedBlock>> block;
  RoutedNetImpl()
      : in(register_module("in", torch::nn::Linear(5, width))),
        out(register_module("out", torch::nn::Linear(width, 1))),
        list(register_module("blocks", torch::nn::ModuleList())) {
    for (std::int64_t b = 0; b <= blocks; ++b) {
      block.push_back(accel::Sharded<RoutedBlock>());
      list->push_back(block.back());
    }
  }
  // skip: per row, the block it bypasses. call_empty: a block none of the rows use is still
  // called, on no rows (what Zero3 needs); otherwise it is not called at all.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& skip, bool late,
                        bool call_empty) {
    torch::Tensor h = in(x);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const torch::Tensor rows = skip.ne(b).nonzero().reshape({-1});
      if (rows.numel() == 0 && !call_empty) continue;
      const torch::Tensor gated = skip.index_select(0, rows).eq(b + 1).nonzero().reshape({-1});
      h = h.index_copy(0, rows, block[b](h.index_select(0, rows), gated));
    }
    if (late) h = block[blocks](h, torch::empty({0}, torch::kLong));
    return out(h);
  }
};
TORCH_MODULE(RoutedNet);

// Micro-batch m of the global batch: rank r's rows are [r * 4, r * 4 + 4); they all skip block
// 1 + (r + m) % 3, so two ranks never skip the same block. The late block runs at every third
// micro-batch from the third on.
struct MicroBatch {
  torch::Tensor x, y, skip;
  bool late = false;
};
MicroBatch global_micro_batch(std::int64_t m, int world) {
  torch::manual_seed(100 + m);
  MicroBatch batch;
  batch.x = torch::randn({rows_per_rank * world, 5});
  batch.y = batch.x.sum(1, /*keepdim=*/true).sin();
  batch.skip = torch::empty({rows_per_rank * world}, torch::kLong);
  for (int r = 0; r < world; ++r)
    batch.skip.narrow(0, r * rows_per_rank, rows_per_rank).fill_(1 + (r + m) % 3);
  batch.late = m % 3 == 2;
  return batch;
}

constexpr int windows = 6;

torch::optim::AdamW make_adamw(torch::nn::Module& net) {
  return torch::optim::AdamW(net.parameters(), torch::optim::AdamWOptions(0.02).weight_decay(0.1));
}

// `windows` optimizer steps of Accel against one process on the global batch (accumulating as
// Accel does, and zeroing gradients in place as accel's zero_grad does on one process): within
// 1e-5 relative, and the same on every rank.
// drop_gradients: after each step the gradients are dropped (set to none, as torch 2.x's
// zero_grad does by default) rather than zeroed, so that a block this rank skips has none.
template <class Accel>
void routed_matches_single_process(bool call_empty, accel::Options options = test_options(),
                                   bool drop_gradients = false) {
  Accel acc(options);
  const int r = acc.process_index(), w = acc.num_processes();
  torch::manual_seed(7);
  RoutedNet net;
  auto user_optimizer = make_adamw(*net);
  auto [model, optimizer] = acc.prepare(net, user_optimizer);
  constexpr int steps = Accel::accumulation_steps;
  for (std::int64_t m = 0; m < windows * steps; ++m) {
    const MicroBatch global = global_micro_batch(m, w);
    const auto mine = [&](const torch::Tensor& t) {
      return t.narrow(0, r * rows_per_rank, rows_per_rank);
    };
    acc.backward(torch::mse_loss(model(mine(global.x), mine(global.skip), global.late, call_empty),
                                 mine(global.y)));
    optimizer.step();
    optimizer.zero_grad();
    if (drop_gradients)
      for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
  }

  torch::manual_seed(7);
  RoutedNet reference;
  auto reference_optimizer = make_adamw(*reference);
  for (std::int64_t m = 0; m < windows * steps; ++m) {
    const MicroBatch global = global_micro_batch(m, w);
    (torch::mse_loss(reference(global.x, global.skip, global.late, call_empty), global.y) / steps)
        .backward();
    if ((m + 1) % steps != 0) continue;
    reference_optimizer.step();
    torch::NoGradGuard no_grad;
    for (auto& p : reference->parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();
  }
  // The late block's first step came after its first gradient: weight decay alone would have
  // moved it before (the comparison below sees that).
  accel_test::expect_matches_reference(acc, net, *reference);
}

// Zero3 and Fsdp<FullShard>: rank r's rows skip a block the other ranks' rows call, and the
// block is not called on rank r. Every rank fails in its first backward, naming the units its
// forward called, before any optimizer step.
template <class Accel>
void skipped_units_refused() {
  Accel acc(test_options());
  const int r = acc.process_index(), w = acc.num_processes();
  torch::manual_seed(7);
  RoutedNet net;
  auto user_optimizer = make_adamw(*net);
  auto [model, optimizer] = acc.prepare(net, user_optimizer);
  const MicroBatch global = global_micro_batch(0, w);
  const auto mine = [&](const torch::Tensor& t) {
    return t.narrow(0, r * rows_per_rank, rows_per_rank);
  };
  const std::string skipped = fmt::format("blocks.{}", 1 + r % 3);
  std::string what;
  try {
    acc.backward(torch::mse_loss(model(mine(global.x), mine(global.skip), false, false),
                                 mine(global.y)));
    optimizer.step();
  } catch (const accel::Error& error) {
    what = error.what();
  }
  fmt::print("rank {} caught: {}\n", r, what);
  EXPECT(what.find("the ranks did not call the same Sharded units in the same order") !=
         std::string::npos);
  EXPECT(what.find(fmt::format("on rank {} the forwards called and the backwards reached: "
                               "forward the root unit, forward blocks.0",
                               r)) != std::string::npos);
  EXPECT(what.find("forward " + skipped) == std::string::npos);
  EXPECT(what.find("on an empty slice of the batch") != std::string::npos);
}

}  // namespace

int run(int argc, char** argv) {
  using Zero3 = accel::Accelerator<accel::Zero3>;
  using FullShard = accel::Accelerator<accel::Fsdp<accel::FullShard>>;
  using Zero3Accum = accel::Accelerator<accel::Zero3, accel::Fp32, accel::GradAccum<2>>;
  using Zero2Accum = accel::Accelerator<accel::Zero2, accel::Fp32, accel::GradAccum<2>>;
  using DdpAccum = accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<2>>;
  const accel_test::Scenarios scenarios = {
      {"routed_zero3", [] { routed_matches_single_process<Zero3>(true); }},
      {"routed_zero3_accum", [] { routed_matches_single_process<Zero3Accum>(true); }},
      {"routed_zero3_prefetch",
       [] {
         accel::Options options = test_options();
         options.prefetch_units = true;
         routed_matches_single_process<Zero3>(true, options);
       }},
      {"routed_fsdp_full_shard", [] { routed_matches_single_process<FullShard>(true); }},
      {"routed_zero2",
       [] { routed_matches_single_process<accel::Accelerator<accel::Zero2>>(false); }},
      {"routed_zero2_accum", [] { routed_matches_single_process<Zero2Accum>(false); }},
      {"routed_ddp_find_unused",
       [] {
         accel::Options options = test_options();
         options.ddp.find_unused_parameters = true;
         routed_matches_single_process<accel::Accelerator<accel::Ddp>>(false, options);
       }},
      // Gradients copied out of the buckets and dropped after each step: a block this rank
      // skips now has no gradient, and its slot still holds the last step's average, which must
      // not be sent again.
      {"routed_ddp_find_unused_copied",
       [] {
         accel::Options options = test_options();
         options.ddp.find_unused_parameters = true;
         options.ddp.gradients_as_bucket_views = false;
         routed_matches_single_process<accel::Accelerator<accel::Ddp>>(false, options, true);
       }},
      {"routed_ddp_accum_find_unused",
       [] {
         accel::Options options = test_options();
         options.ddp.find_unused_parameters = true;
         routed_matches_single_process<DdpAccum>(false, options);
       }},
      {"skipped_units_refused_zero3", skipped_units_refused<Zero3>},
      {"skipped_units_refused_fsdp_full_shard", skipped_units_refused<FullShard>},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker_routing
