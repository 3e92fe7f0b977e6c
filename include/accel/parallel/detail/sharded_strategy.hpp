// What the sharded strategies (Zero2, Zero3 and their Fsdp names) share: flat parameters, the
// hooks that see gradients arrive, and an optimizer of the user's type over this rank's shard.
//
//   flatten()           trainable parameters of one group (a bucket for Zero2, a unit for Zero3),
//                       by dtype, into flat parameters (flat_parameter.hpp); a hook on each
//                       parameter's gradient accumulator tells Derived::gradient_arrived(f, i).
//   prepare(optimizer)  the type is checked (shardable_optimizer.hpp); the user's object keeps its
//                       param groups but never steps and holds no state.
//   optimizer.step()    the first step builds, once, an optimizer of the user's type over this
//                       rank's pieces of the shards, one param group per user group; each step
//                       copies the user's group options in (LR schedulers keep working), steps,
//                       then Derived::after_shard_step(flats) (Zero2 all-gathers the updated
//                       shards; Zero3 leaves them sharded until the next forward).
//   Options::offload    optimizer: the shard optimizer steps CPU copies of the pieces instead
//                       (pinned when the device is CUDA): the pieces' gradients are copied to
//                       them before the step and the values back after it. On one process, where
//                       nothing is flattened, the pieces are the parameters themselves.
//                       parameters (Zero3): the shards themselves live on the CPU
//                       (FlatParameter::keep_shard_on_host), so the optimizer steps there with
//                       no copies.
//
// Derived (CRTP, no virtual dispatch) provides gradient_arrived(std::size_t flat, std::size_t index)
// and after_shard_step(const std::vector<std::size_t>& flats).
//
// Of the strategy contract (../contract.hpp) this writes the gradient-access and checkpoint-slice
// roles whole, the optimizer half of the training step and the memory counting; Derived writes
// the rest of the training step and gather_full / release_full. Where nothing is sharded (one
// process, frozen parameters) it calls the replicated roles by name (../replicated.hpp).
//
// Longer than accel's headers should be because the shard optimizer's life (built at the first
// step, stepped, saved and loaded in slices, offloaded) and the flat parameters it steps are one
// piece of state; flattening (flat_parameter.hpp), unit routing (units.hpp) and the optimizer's
// type checks (shardable_optimizer.hpp) already live beside it.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../detail/error.hpp"
#include "../../options.hpp"
#include "../../runtime/any_rank.hpp"
#include "../../runtime/process_group.hpp"
#include "../replicated.hpp"
#include "../flat_parameter.hpp"
#include "../fused_step.hpp"
#include "shardable_optimizer.hpp"

namespace accel::parallel::detail {

// The members that do not depend on the optimizer's type are defined in
// impl/sharded_strategy.ipp; with ACCEL_SEPARATE_COMPILATION the ShardedStrategy of each Derived
// is compiled once, in accel's separately compiled part (../impl/zero2.ipp, ../impl/zero3.ipp),
// and a program's translation units only call them.
template <class Derived>
class ShardedStrategy {
 public:
  // name: the policy, as errors call it ("Zero2", "Fsdp<FullShard>").
  explicit ShardedStrategy(std::string_view name) : name_(name) {}
  ShardedStrategy(const ShardedStrategy&) = delete;
  ShardedStrategy& operator=(const ShardedStrategy&) = delete;

  void attach(runtime::ProcessGroup* process_group, const Options& options);

  // Strategies without shards (Ddp) refuse Options::offload.
  static constexpr bool can_offload = true;

  template <class Optimizer>
  void prepare_optimizer(Optimizer& optimizer) {
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

  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    if constexpr (ShardableOptimizer<Optimizer>::value) step_shard(optimizer);
  }

  // In place, as every strategy's: this optimizer's shard gradients, and any full gradient its
  // parameters hold while a window collects.
  template <class Optimizer>
  void zero_grad(Optimizer& optimizer) {
    zero_grad_in_place(optimizer);
    if (group_ == nullptr) return;
    torch::NoGradGuard no_grad;
    for (const auto& pieces : index(optimizer).pieces)
      for (const auto& piece : pieces)  // a shard gradient not allocated yet is zeros already
        if (piece.grad().defined()) piece.mutable_grad().zero_();
  }

  // What clip_grad_norm scales: once a window's gradients are reduce-scattered, this rank's
  // shard of them (its pieces of `parameters`); before, the full local gradients, measured only.
  std::vector<torch::Tensor> gradients_to_clip(const std::vector<torch::Tensor>& parameters) const;

  // What `optimizer` steps with on this rank, for loss scaling to unscale and check: once a
  // window's gradients are reduce-scattered, its pieces' shard gradients (every rank checks its
  // own shard; the ranks then combine what they found); before, the full local gradients.
  std::vector<torch::Tensor> gradients_of(const torch::optim::Optimizer& optimizer);

  // The shards' parts of the norm add up across the ranks sharing them (or their maximum is
  // taken) once the gradients are sharded; before, each rank measures its own full gradients.
  // (Fsdp<HybridShard>'s nodes hold the same shards: one node's sum is the whole.)
  torch::Tensor reduce_norm(torch::Tensor local, bool is_max);

  // The optimizer built over this rank's shard for `user` (null before its first step, and on
  // one process): for inspecting what each rank keeps.
  const torch::optim::Optimizer* shard_optimizer(const torch::optim::Optimizer& user) const;
  // Flat buffers (while they have storage), shards, shard and full gradients, and the shard
  // optimizers' state.
  void count_memory(state::MemoryCounter& counter) const;

  // --- Checkpoint slices (../contract.hpp): each rank writes its pieces of the flattened
  // parameters and their optimizer state; parameters left out of the flat ones (frozen) are
  // replicated, as under Ddp. Replicated residency (Zero2) reads parameters whole, sharded
  // residency (Zero3) only this rank's pieces.
  bool is_flattened(const torch::Tensor& parameter) const;
  std::vector<std::int64_t> parameter_shape(const torch::Tensor& parameter) const;
  std::optional<ParameterSlice> saved_slice(const torch::Tensor& parameter, int rank) const;
  std::optional<ParameterSlice> loaded_slice(const torch::Tensor& parameter) const;
  // The shard optimizer's slots (building it if it has not stepped yet): saved and loaded by
  // every rank.
  std::vector<StateSlot> state_slots(torch::optim::Optimizer& user, bool saving, int rank);
  std::vector<torch::Tensor> flat_gradients() const;
  // The gradients collected so far in the window, as saved; they count at its end as if this
  // process had collected them (pending: the reduce-scatter sends them).
  void restore_flat_gradients(const std::vector<torch::Tensor>& gradients);
  // Parameters sharded at rest go back to rest: a full copy gathered before the load is stale;
  // so are the optimizer's CPU copies.
  void after_state_loaded();

  // The flat parameters, in preparation order (Zero2: one per prepared model and dtype; Zero3:
  // one per unit and dtype).
  const std::vector<std::unique_ptr<FlatParameter>>& flat_parameters() const { return flats_; }

 protected:
  struct Location {
    std::size_t flat = 0;
    std::size_t index = 0;
  };
  struct Frozen {
    torch::Tensor parameter;
    std::string name;
    std::string model;
  };
  // A prepared optimizer: which flat parameters it updates, this rank's pieces of its param
  // groups, and the optimizer over them (built at its first step).
  struct ShardedOptimizer {
    const torch::optim::Optimizer* user = nullptr;
    bool indexed = false;
    std::vector<std::size_t> flats;                  // the same on every rank, ascending
    std::vector<std::vector<torch::Tensor>> pieces;  // per user param group
    std::size_t parameters = 0;                      // in all its groups, when indexed
    std::unique_ptr<torch::optim::Optimizer> shard;
    // Per user param group, beside pieces: which of its parameters each piece is, and where.
    struct PieceOf {
      std::size_t index;
      std::int64_t begin;
    };
    std::vector<std::vector<PieceOf>> piece_of;
    // build_shard() for the user's type, which only register_optimizer() knows.
    ShardedOptimizer& (*build)(ShardedStrategy&, torch::optim::Optimizer&) = nullptr;
    // Options::offload.optimizer: beside pieces, the CPU copies the shard optimizer steps
    // (built with it; empty otherwise).
    std::vector<std::vector<torch::Tensor>> host;
  };

  // Whether the shard optimizer steps CPU copies of the pieces (offload.optimizer alone: with
  // offload.parameters the pieces are on the CPU already).
  bool steps_host_copies() const { return offload_.optimizer && !offload_.parameters; }

  // The pieces' current values into the CPU copies, where the parameters changed other than by
  // a step (a checkpoint loaded, full_parameters() written back).
  void copy_pieces_to_host();

  // Before a model is flattened: its parameters and buffers from rank 0 (unless they come from
  // an empty build, replayed from rank 0's generator state), and no optimizer stepped yet (their
  // shards were cut from the models prepared then).
  void begin_prepare(torch::nn::Module& module, const std::string& label, bool broadcast = true);

  // Flattens the trainable parameters among `named` (by dtype and device, in order; a parameter
  // listed twice, or flattened earlier, once) and records the frozen ones. Returns the indices of
  // the flat parameters made.
  std::vector<std::size_t> flatten(const std::vector<std::pair<std::string, torch::Tensor>>& named,
                                   const std::string& label, Residency residency);

  // This flat parameter's full gradient, averaged over the ranks, added to its shard gradient;
  // then the full gradient is released. A flat parameter no backward reached since its last
  // reduce-scatter holds zeros only and sends nothing. Under Fsdp<HybridShard> the shard is
  // averaged within the node, then across the nodes (each node as many ranks: the mean of the
  // means is the mean).
  void reduce_scatter_gradient(std::size_t f);
  // Flat parameter f's full gradient reduce-scattered (mean) in place where the shared-memory
  // path carries it: the chunk lands in this rank's part of the buffer itself (dead once sent),
  // so no buffer of the shard's size is allocated per reduce-scatter.
  runtime::ProcessGroup::PendingCollective start_reduce_scatter(std::size_t f);
  // Flat parameter f's reduce-scattered (averaged) gradient, averaged across the nodes too under
  // Fsdp<HybridShard>, added to its shard gradient.
  void add_to_shard(std::size_t f, torch::Tensor averaged);

  // What every backward starts with: the layout still holds, and a micro-step that does not end
  // its window collects full gradients again, which clip_grad_norm then measures until the
  // window's reduce-scatter.
  void begin_backward(bool sync);

  // Which parameters are sharded was fixed at prepare(), and the other ranks' collectives with
  // it: freezing or unfreezing afterwards is refused.
  void check_still_trainable() const;

  // The part of a flattened parameter in this rank's shard, where it starts in the parameter.
  std::optional<ParameterSlice> this_ranks_piece(const Location& location) const;

  // Under Fsdp<HybridShard> a node's copy of the shards is the same as every other node's: one
  // node saves them (the ranks of the first), every rank loads its own.
  bool saves_shards() const { return replica_group_ == nullptr || replica_group_->rank() == 0; }

  std::string_view name_;
  runtime::ProcessGroup* group_ = nullptr;         // every rank: broadcasts, agreements
  runtime::ProcessGroup* shard_group_ = nullptr;   // the ranks the shards split across
  runtime::ProcessGroup* replica_group_ = nullptr; // the same shard on other nodes, or null
  std::vector<std::unique_ptr<FlatParameter>> flats_;
  std::vector<std::string> labels_;  // the model (or unit) of each flat parameter, for errors
  // Per flat parameter: gradients arrived since its last reduce-scatter. Written by autograd's
  // thread during backward, read after it; one byte each, so that autograd threads of different
  // devices never share a word.
  std::vector<char> pending_;
  std::unordered_map<const void*, Location> where_;  // by TensorImpl
  std::vector<Frozen> frozen_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<ShardedOptimizer> optimizers_;
  bool sharded_ = false;  // the gradients live in the shards (after a window's reduce-scatter)
  OffloadOptions offload_;
  bool fused_optimizer_ = true;  // Options::fused_optimizer
  // Where flat parameters of an empty build's (meta) parameters are made.
  torch::Device build_device_ = torch::kCPU;

 private:
  Derived& derived() { return static_cast<Derived&>(*this); }

  static std::size_t count_parameters(const torch::optim::Optimizer& optimizer);

  // Builds the shard optimizer at the first step; then options in, step, Derived's after-step.
  template <class Optimizer>
  void step_shard(Optimizer& optimizer) {
    if (group_ == nullptr && !steps_host_copies()) {
      step_optimizer(optimizer, fused_optimizer_);  // one process: nothing is flattened
      return;
    }
    // The shards are cut from the param groups as they are at the first step.
    if (ShardedOptimizer* existing = find(optimizer); existing != nullptr && !existing->shard)
      existing->indexed = false;
    ShardedOptimizer& sharded = build_shard(optimizer);
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
    // Every piece steps with a gradient, zeros where none arrived (the shard gradients are
    // allocated when first needed): what the optimizer did when they were allocated at prepare.
    for (const std::size_t f : sharded.flats) flats_[f]->shard_gradient();
    step_shard_optimizer(sharded);
    derived().after_shard_step(sharded.flats);
  }

  // The shard optimizer's step. Under offload.optimizer the pieces' gradients go to the CPU
  // copies first (a piece without one this step leaves its copy without one, so the optimizer
  // skips it as it would the parameter), and the updated values come back after it. Blocking
  // copies: the step needs the gradients, and the next forward the values. The step itself is
  // fused where it applies (../fused_step.hpp, Options::fused_optimizer).
  void step_shard_optimizer(ShardedOptimizer& sharded);

  // The optimizer over this rank's shard, built from the param groups as they are now unless it
  // exists already.
  template <class Optimizer>
  ShardedOptimizer& build_shard(Optimizer& optimizer) {
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
    if ((group_ == nullptr && !steps_host_copies()) || find(optimizer) != nullptr) return;
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
    sharded.build = [](ShardedStrategy& self, torch::optim::Optimizer& user) -> ShardedOptimizer& {
      return self.build_shard(static_cast<Optimizer&>(user));
    };
  }

  ShardedOptimizer* find(const torch::optim::Optimizer& user);

  // Locates the optimizer's parameters in the flat parameters (after every model is prepared).
  template <class Optimizer>
  ShardedOptimizer& index(Optimizer& user) {
    ShardedOptimizer* sharded = find(user);
    if (sharded == nullptr) {
      prepare_optimizer(user);  // stepped without prepare(): the same checks
      sharded = find(user);
    }
    return index_pieces(*sharded, user);
  }
  ShardedOptimizer& index_pieces(ShardedOptimizer& found, const torch::optim::Optimizer& user);

  // Tells Derived when autograd has accumulated the gradient of parameter i of flat parameter f.
  void install_hook(const torch::Tensor& parameter, std::size_t f, std::size_t i);

  [[noreturn]] void fail_trainability(const std::string& parameter, const std::string& model,
                                      std::string_view change) const;
};

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/sharded_strategy.ipp"
#endif
