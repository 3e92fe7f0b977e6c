// The optimizers a sharded strategy (Zero2, Zero3 and their Fsdp names) steps in place of the
// user's: one of the three parts of sharded_strategy.hpp, beside the flat parameters
// (flat_parameter_set.hpp) and the reduce-scatter (gradient_reduce_scatter.hpp).
//
//   add(optimizer)   the type is checked (shardable_optimizer.hpp); the user's object keeps its
//                    param groups but never steps and holds no state.
//   step(optimizer)  the first step builds, once, an optimizer of the user's type over this
//                    rank's pieces of the shards, one param group per user group; each step
//                    copies the user's group options in (LR schedulers keep working) and steps.
//   offload          (Options::offload) optimizer: the shard optimizer steps CPU copies of the
//                    pieces instead (pinned when the device is CUDA): the pieces' gradients are
//                    copied to them before the step and the values back after it. On one
//                    process, where nothing is flattened, the pieces are the parameters
//                    themselves. parameters: the shards themselves live on the CPU
//                    (FlatParameter::keep_shard_on_host), so the optimizer steps there with no
//                    copies.
//
// Kept apart because a shard optimizer's life (registered at prepare(), indexed once every model
// is prepared, built at the first step, stepped, saved and loaded in slices, offloaded) is one
// piece of state that only reads the flat parameters: where each of the user's parameters went,
// and this rank's pieces of them. What the strategy does after a step (Zero2 all-gathers the
// updated shards, Zero3 leaves them sharded) is the strategy's.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../detail/error.hpp"
#include "../../detail/separate_compilation.hpp"
#include "../../options.hpp"
#include "../../runtime/any_rank.hpp"
#include "../../runtime/process_group.hpp"
#include "../../detail/memory_counter.hpp"
#include "../contract.hpp"
#include "../fused_step.hpp"
#include "flat_parameter_set.hpp"
#include "shardable_optimizer.hpp"

namespace accel::parallel::detail {

class ShardOptimizers {
 public:
  // A prepared optimizer: which flat parameters it updates, this rank's pieces of its param
  // groups, and the optimizer over them (built at its first step).
  struct ShardedOptimizer {
    const torch::optim::Optimizer* user = nullptr;
    bool indexed = false;
    std::vector<std::size_t> flats;                  // the same on every rank, ascending
    std::vector<std::vector<torch::Tensor>> pieces;  // per user param group
    std::size_t parameters = 0;                      // in all its groups, when indexed
    std::unique_ptr<torch::optim::Optimizer> shard;
    // Per user param group, beside pieces: which of its parameters each piece is, and where
    // (on more than one process also the flat parameter and its index there).
    struct PieceOf {
      std::size_t index;
      std::int64_t begin;
      FlatParameterSet::Location location = {};
    };
    std::vector<std::vector<PieceOf>> piece_of;
    // build() for the user's type, which only add() knows.
    ShardedOptimizer& (*build)(ShardOptimizers&, torch::optim::Optimizer&) = nullptr;
    // Options::offload.optimizer: beside pieces, the CPU copies the shard optimizer steps
    // (built with it; empty otherwise).
    std::vector<std::vector<torch::Tensor>> host;
  };

  // name: the policy, as errors call it. flats: where the optimizers' parameters were flattened.
  ShardOptimizers(std::string_view name, FlatParameterSet& flats) : name_(name), flats_(flats) {}
  ShardOptimizers(const ShardOptimizers&) = delete;
  ShardOptimizers& operator=(const ShardOptimizers&) = delete;

  // group: every rank (null on one process); offload and fused: from Options.
  void configure(runtime::ProcessGroup* group, const OffloadOptions& offload, bool fused) {
    group_ = group;
    offload_ = offload;
    fused_ = fused;
  }

  template <class Optimizer>
  void add(Optimizer& optimizer) {
    static_assert(ShardableOptimizer<Optimizer>::value,
                  "accel: Zero2, Zero3 and Fsdp shard optimizer state by building the same "
                  "optimizer type over each rank's shard, which is exact only for element-wise "
                  "optimizers: torch::optim::SGD, Adam, AdamW, Adagrad and RMSprop; the optimizer "
                  "passed to prepare() (its type is in the 'Optimizer = ...' of this "
                  "instantiation) is none of them; use one of those five (declared with its own "
                  "type, not as torch::optim::Optimizer), or Ddp");
    // Nothing more for a refused type: the assertion above is the one error.
    if constexpr (ShardableOptimizer<Optimizer>::value) register_optimizer(optimizer);
  }

  // Steps `optimizer`'s shard optimizer (building it at the first step) and returns the flat
  // parameters it updated; null where the user's optimizer stepped itself (one process, nothing
  // offloaded: nothing is flattened).
  template <class Optimizer>
  const std::vector<std::size_t>* step(Optimizer& optimizer) {
    if (!builds_shards()) {
      step_optimizer(optimizer, fused_);
      return nullptr;
    }
    // The shards are cut from the param groups as they are at the first step.
    if (ShardedOptimizer* existing = find(optimizer); existing != nullptr && !existing->shard)
      existing->indexed = false;
    ShardedOptimizer& sharded = build(optimizer);
    const auto& groups = optimizer.param_groups();
    auto& shard_groups = sharded.shard->param_groups();
    if (groups.size() != shard_groups.size() || count_parameters(optimizer) != sharded.parameters)
      accel::detail::fail("{}: the {} had {} param groups of {} parameters when it first stepped "
                          "and has {} of {} now; its shards were cut then, so add param groups "
                          "and parameters before the first step",
                          name_, ShardableOptimizer<Optimizer>::name, shard_groups.size(),
                          sharded.parameters, groups.size(), count_parameters(optimizer));
    // The user's options as they are now: a scheduler, or the user, may have changed them.
    for (std::size_t g = 0; g < groups.size(); ++g)
      shard_groups[g].set_options(groups[g].options().clone());
    // A piece steps with its shard gradient (zeros where none arrived this window; the shard
    // gradients are allocated when first needed) once its parameter has had a gradient on any
    // rank: before, on one process, its .grad would be undefined and the optimizer skip it.
    for (const std::size_t f : sharded.flats) flats_[f].shard_gradient();
    const std::vector<torch::Tensor> withheld = withhold_gradients_never_produced(sharded);
    step_shard_optimizer(sharded);
    give_back_gradients(sharded, withheld);
    return &sharded.flats;
  }

  // The shard gradients of `optimizer`'s pieces, in place (a shard gradient not allocated yet is
  // zeros already).
  template <class Optimizer>
  void zero_piece_gradients(Optimizer& optimizer) {
    torch::NoGradGuard no_grad;
    for (const auto& pieces : index(optimizer).pieces)
      for (const auto& piece : pieces)
        if (piece.grad().defined()) piece.mutable_grad().zero_();
  }

  ACCEL_DECL ShardedOptimizer* find(const torch::optim::Optimizer& user);
  // The optimizer built over this rank's shard for `user` (null before its first step).
  ACCEL_DECL const torch::optim::Optimizer* shard_of(const torch::optim::Optimizer& user) const;

  // The gradients `found` steps with: its pieces' shard gradients (allocated if need be).
  ACCEL_DECL std::vector<torch::Tensor> piece_gradients(ShardedOptimizer& found,
                                                        const torch::optim::Optimizer& user);

  // The shard optimizer's slots, building it first if it has not stepped yet; none where
  // `listed` is false (built all the same, as every rank's is).
  ACCEL_DECL std::vector<StateSlot> state_slots(ShardedOptimizer& found,
                                                torch::optim::Optimizer& user, bool listed);

  // Before another model is prepared: refused once an optimizer stepped (its shards were cut
  // from the models prepared then); otherwise each optimizer may now find more parameters.
  ACCEL_DECL void before_model_prepared(const std::string& label);

  // The pieces' current values into the CPU copies, where the parameters changed other than by
  // a step (a checkpoint loaded, full_parameters() written back).
  ACCEL_DECL void copy_pieces_to_host();

  // The CPU copies and the shard optimizers' state.
  ACCEL_DECL void count_memory(state::MemoryCounter& counter) const;

 private:
  // Whether the shard optimizer steps CPU copies of the pieces (offload.optimizer alone: with
  // offload.parameters the pieces are on the CPU already).
  bool steps_host_copies() const { return offload_.optimizer && !offload_.parameters; }
  // Whether the user's optimizers are rebuilt over pieces at all: on more than one process, or
  // to step CPU copies of them.
  bool builds_shards() const { return group_ != nullptr || steps_host_copies(); }

  ACCEL_DECL static std::size_t count_parameters(const torch::optim::Optimizer& optimizer);

  // The shard optimizer's step. Under offload.optimizer the pieces' gradients go to the CPU
  // copies first (a piece without one this step leaves its copy without one, so the optimizer
  // skips it as it would the parameter), and the updated values come back after it. Blocking
  // copies: the step needs the gradients, and the next forward the values. The step itself is
  // fused where it applies (../fused_step.hpp, Options::fused_optimizer).
  ACCEL_DECL void step_shard_optimizer(ShardedOptimizer& sharded);

  // The .grad of each piece whose parameter no rank has produced a gradient for yet, taken away
  // for the step (each piece's, in order; undefined where it stays), and given back after it.
  ACCEL_DECL std::vector<torch::Tensor> withhold_gradients_never_produced(ShardedOptimizer& sharded);
  ACCEL_DECL static void give_back_gradients(ShardedOptimizer& sharded,
                                             const std::vector<torch::Tensor>& withheld);

  // The optimizer over this rank's shard, built from the param groups as they are now unless it
  // exists already.
  template <class Optimizer>
  ShardedOptimizer& build(Optimizer& optimizer) {
    ShardedOptimizer& sharded = index(optimizer);
    if (sharded.shard) return sharded;
    const auto& groups = optimizer.param_groups();
    if (steps_host_copies()) {
      torch::NoGradGuard no_grad;
      sharded.host.assign(groups.size(), {});
      for (std::size_t g = 0; g < groups.size(); ++g)
        for (const torch::Tensor& piece : sharded.pieces[g]) {
          const auto on_host = torch::TensorOptions().dtype(piece.dtype()).device(torch::kCPU);
          torch::Tensor copy = torch::empty(piece.sizes(), on_host.pinned_memory(piece.is_cuda()));
          copy.copy_(piece);
          sharded.host[g].push_back(copy);
        }
    }
    std::vector<torch::optim::OptimizerParamGroup> shard_groups;
    for (std::size_t g = 0; g < groups.size(); ++g)
      shard_groups.emplace_back(sharded.host.empty() ? sharded.pieces[g] : sharded.host[g],
                                groups[g].options().clone());
    using Options = typename ShardableOptimizer<Optimizer>::options;
    sharded.shard = std::make_unique<Optimizer>(std::move(shard_groups),
                                                static_cast<const Options&>(optimizer.defaults()));
    return sharded;
  }

  template <class Optimizer>
  void register_optimizer(Optimizer& optimizer) {
    if (!builds_shards() || find(optimizer) != nullptr) return;
    // State that exists before prepare() (the optimizer stepped, or a checkpoint was loaded into
    // it) would have to be cut into shards; refused on every rank rather than silently dropped.
    if (runtime::any_rank(group_, has_stepped(optimizer)))
      accel::detail::fail("{}: the {} passed to prepare() already holds optimizer state on at "
                          "least one rank (it stepped, or state was loaded into it); {} builds "
                          "each rank's state for its shard from the first step on, so prepare "
                          "the optimizer before it steps (or train with Ddp to continue from "
                          "that state)",
                          name_, ShardableOptimizer<Optimizer>::name, name_);
    // Adagrad's constructor allocated full-size accumulators: the shard optimizer makes its own.
    optimizer.state().clear();
    ShardedOptimizer& sharded = optimizers_.emplace_back();
    sharded.user = &optimizer;
    sharded.build = [](ShardOptimizers& self, torch::optim::Optimizer& user) -> ShardedOptimizer& {
      return self.build(static_cast<Optimizer&>(user));
    };
  }

  // Locates the optimizer's parameters in the flat parameters (after every model is prepared).
  template <class Optimizer>
  ShardedOptimizer& index(Optimizer& user) {
    ShardedOptimizer* sharded = find(user);
    if (sharded == nullptr) {
      add(user);  // stepped without prepare(): the same checks
      sharded = find(user);
    }
    return index_pieces(*sharded, user);
  }
  ACCEL_DECL ShardedOptimizer& index_pieces(ShardedOptimizer& found,
                                            const torch::optim::Optimizer& user);

  std::string_view name_;
  FlatParameterSet& flats_;
  runtime::ProcessGroup* group_ = nullptr;  // every rank; null on one process
  OffloadOptions offload_;
  bool fused_ = true;  // Options::fused_optimizer
  std::vector<ShardedOptimizer> optimizers_;
};

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/shard_optimizers.ipp"
#endif
