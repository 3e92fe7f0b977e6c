// Zero3 (DeepSpeed ZeRO stage 3; Fsdp<FullShard> is the same): parameters, gradients and
// optimizer state all sharded across ranks. Between steps a rank holds only its shard of each.
//
//   prepare(model)   parameters and buffers broadcast from rank 0; the model cut into units
//                    (detail/units.hpp: each child of a Sequential, and the rest as the root
//                    unit); each unit's trainable parameters flattened by dtype with sharded
//                    residency (flat_parameter.hpp), then put at rest: the full buffers
//                    freed, the parameters zero-element tensors.
//   forward          the root unit is all-gathered when the model's forward starts and kept until
//                    its backward ends (PyTorch FSDP keeps its root so too); a child unit is
//                    all-gathered when the Sequential calls it and freed when it returns (its
//                    storage released, the parameters keeping their shapes for autograd), and a
//                    hook on its output all-gathers it again when backward reaches it. Without a
//                    graph (torch::NoGradGuard) every unit is back at rest after the forward.
//   prefetch         (Options::prefetch_units) as a child unit starts, the next one's all-gather
//                    starts on the shared-memory path's thread, overlapping this unit's compute;
//                    in backward the one before it, in the order backward reaches them. At most
//                    two child units gathered at once, and never one whose gather is in flight
//                    freed or read before it lands.
//   backward         gradients accumulate into a unit's full flat gradient, allocated when its
//                    backward starts; once every gradient of the unit has arrived its full
//                    parameters are freed, and on the micro-step that ends a window its gradient
//                    is reduce-scattered (mean) into this rank's shard gradient (allocated by the
//                    first such reduce-scatter, or the first step: prepare() allocates the shards
//                    alone) and released. Reduce-scatters go in one fixed order, the same on
//                    every rank (the last prepared model first, each model's child units last
//                    called first, then its root): a finished unit waits for the ones before it,
//                    and after autograd every unit of a model this window reached is sent, zeros
//                    where this rank's backward left it without gradients.
//   same units       every rank must call and reach the same units in the same order, which the
//                    ranks compare as each backward starts and ends, and after a forward without
//                    a graph (detail/unit_order_check.hpp); a
//                    parameter no rank has had a gradient for is not stepped (as on one process,
//                    where its .grad is undefined).
//   optimizer.step() the user's optimizer type over this rank's shard (detail/shard_optimizers.hpp);
//                    nothing gathered: the next forward gathers the updated shards.
//   offload          (Options::offload) parameters: the shards and their gradients live on the
//                    CPU; a gather copies the shard to the device first, and the step runs on
//                    the CPU. optimizer alone: the shards stay on the device, the optimizer steps
//                    CPU copies of them (detail/shard_optimizers.hpp).
//
// Under GradAccum the full gradients of every unit collect through the window (no
// communication) and are reduce-scattered at its end, as Zero2 does.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../data/tensor_tree.hpp"
#include "../detail/deferred_build.hpp"
#include "../detail/separate_compilation.hpp"
#include "../policy/parallelism.hpp"
#include "detail/sharded_strategy.hpp"
#include "memory_layout.hpp"
#include "detail/unit_order_check.hpp"
#include "detail/units.hpp"

namespace accel::parallel {

class FullyShardedStrategy : public detail::ShardedStrategy {
  using Base = detail::ShardedStrategy;

 public:
  // name: the policy, as errors call it. The base's gradient hooks call gradient_arrived
  // through the callable given here.
  explicit FullyShardedStrategy(std::string_view name)
      : Base(name, [this](std::size_t f, std::size_t i) { gradient_arrived(f, i); }) {}

  // The base steps the shards and says which flat parameters changed; after_shard_step brings
  // them back to where they live between steps.
  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    if (const std::vector<std::size_t>* stepped = step_shards(optimizer))
      after_shard_step(*stepped);
  }

  ACCEL_DECL void attach(runtime::ProcessGroup* group, const Options& options);

  // prepare() hands the model's holder over; units need the shared pointer to walk and rewire
  // its Sequentials.
  ACCEL_DECL void prepare_model(torch::nn::Module& module, const std::string& label);

  // Takes the contract's DeferredModels role (parallel/contract.hpp).
  static constexpr bool deferred_models = true;

  // estimate_memory's question (memory_layout.hpp): one flat per unit and dtype, the units cut as
  // prepare_model cuts them (detail::cut_units); on one process, the whole model.
  ACCEL_DECL static MemoryLayout memory_layout(torch::nn::Module& model,
                                               const LayoutRequest& request);

  // A model of an empty build (accel::deferred_init, on more than one process): cut into units
  // and flattened as prepare_model does, but each flat parameter starts at rest on `device` with
  // only its shard allocated; the build is then replayed from `generator_state` (rank 0's, the
  // same on every rank), one tensor at a time, each value leaving only this rank's piece in the
  // shards (frozen parameters and buffers are kept whole, on `device`). No rank ever holds the
  // model, and the shards are bitwise what an eager build, broadcast and sharded, gives.
  ACCEL_DECL void prepare_deferred_model(torch::nn::Module& module, const std::string& label,
                                         const torch::Device& device,
                                         const accel::detail::DeferredBuild& build,
                                         const torch::Tensor& generator_state);

  ACCEL_DECL void before_forward(torch::nn::Module& module);

  // Without a graph, nothing waits for a backward: the whole model goes back to rest. With one,
  // a hook on a tensor output gathers the root again should a backward before this one's have
  // put it to rest (two forwards, then two backwards).
  template <class Outputs>
  void after_forward(torch::nn::Module& module, const Outputs& outputs) {
    if (group_ == nullptr) return;
    const Model* model = find_model(module);
    if (model == nullptr) return;
    if (!torch::GradMode::is_enabled()) {
      for (const std::size_t u : model->units) to_rest(u);
      unit_order_.check(*group_, name_, unit_names_);
      return;
    }
    if (model->root == no_unit) return;
    std::vector<torch::Tensor> in_graph;
    if constexpr (data::detail::walkable<Outputs>())
      data::for_each_tensor(outputs, [&in_graph](const torch::Tensor& t) {
        if (t.requires_grad()) in_graph.push_back(t);
      });
    if (!in_graph.empty()) hook_backward(in_graph, model->root);
  }

  ACCEL_DECL void before_backward(bool sync);

  // The ranks compare the units they called and reached; on a window's last micro-step, every
  // unit not yet reduce-scattered of each model the window reached is, in the fixed order (a
  // unit whose backward left a parameter unused, gradients collected on earlier micro-steps by a
  // unit this backward did not reach, zeros for one no backward reached here); every unit this
  // backward reached goes back to rest. A unit it did not reach keeps what it holds: a forward's
  // graph may still need it (a GAN's generator across its discriminator's backward).
  ACCEL_DECL void after_backward(bool sync);

  // Called by a unit's wrapper in its Sequential: gathered for the call, freed after it; a hook
  // on the output gathers it again for backward. A module marked with accel::Sharded reaches
  // enter() and leave() through its UnitRoute instead.
  // A unit gathered already (inside full_parameters()) stays gathered.
  template <class Run>
  torch::Tensor unit_forward(std::size_t u, Run&& run) {
    const bool was_gathered = enter(u);
    torch::Tensor output = run();
    leave(u, was_gathered, {output});
    return output;
  }

  // Every unit of `module` gathered (a collective: every rank calls it), for reading or writing
  // the full parameters outside forward; release_full() writes this rank's part back to its
  // shard and frees them.
  ACCEL_DECL void gather_full(torch::nn::Module& module);
  ACCEL_DECL void release_full(torch::nn::Module& module);

  // How many units the prepared models were cut into, root units included (for tests and docs).
  std::size_t unit_count() const { return units_.size(); }
  // Units gathered ahead of their use so far (Options::prefetch_units).
  std::size_t prefetches() const { return prefetches_; }

 private:
  static constexpr std::size_t no_unit = static_cast<std::size_t>(-1);

  struct Unit {
    std::vector<std::size_t> flats;
    std::size_t parameters = 0;  // trainable ones, each counted once
    std::size_t waiting = 0;     // gradients not yet arrived in this backward
    bool reached = false;        // by this backward
    bool finished = false;       // all its gradients arrived in this backward
    bool prefetched = false;     // gathered ahead of its call, not yet used
    std::size_t model = 0;       // in models_
    std::size_t next = no_unit, previous = no_unit;  // child units of its Sequentials, in call order
  };
  struct Model {
    const torch::nn::Module* module = nullptr;
    std::vector<std::size_t> units;  // its child units in call order, then its root unit
    std::size_t root = no_unit;
  };

  template <class Named>
  static std::int64_t total_numel(const Named& named) {
    std::int64_t total = 0;
    for (const auto& item : named) total += item.value().numel();
    return total;
  }

  // The root unit is the fallback: gathered whole for the whole step, it saves nothing. Said
  // once, on rank 0, when it holds most of a model large enough for that to matter.
  ACCEL_DECL void warn_if_mostly_root(const detail::NamedParameters& rest, std::int64_t total,
                                      const std::string& label) const;

  ACCEL_DECL std::size_t add_unit(const detail::NamedParameters& named, const std::string& label,
                                  std::string name);

  // prepare_model's cutting into units and flattening, after begin_prepare.
  ACCEL_DECL void cut_into_units(torch::nn::Module& module, const std::string& label);

  ACCEL_DECL const Model* find_model(const torch::nn::Module& module) const;

  // Unit u's full parameters, gathered unless they are: in Options::sharded_communication.
  // parameters' dtype for training, or with `master`, for full_parameters(), the shards' own
  // values (a unit gathered rounded is gathered again).
  ACCEL_DECL void gather(std::size_t u, bool master = false);

  // The copy of flat parameter f's `shard` that travels when training gathers it in a narrower
  // dtype, its landing buffer set aside; undefined when the shard travels as it is.
  ACCEL_DECL torch::Tensor narrowed_shard(std::size_t f, const torch::Tensor& shard, bool master);
  // f's gather in flight (if any) waited for, and a narrowed one widened into the full buffer.
  ACCEL_DECL void land_gather(std::size_t f);

  // Starts gathering unit u, unless it is gathered or no unit (the end of a Sequential's units).
  ACCEL_DECL void prefetch(std::size_t u);

  ACCEL_DECL bool is_gathered(std::size_t u) const;

  // A gather in flight lands first: its buffer cannot go while the transport writes it.
  ACCEL_DECL void to_rest(std::size_t u);

  // Gathered for a unit's call; whether it was already (then the call frees nothing).
  ACCEL_DECL bool enter(std::size_t u);
  // After the call: its outputs in the graph hooked for backward, its full parameters freed.
  ACCEL_DECL void leave(std::size_t u, bool was_gathered,
                        const std::vector<torch::Tensor>& outputs);

  // Whichever of one call's outputs backward reaches first gathers the unit for it; the others'
  // hooks then do nothing (a block returning two tensors is prepared for backward once).
  ACCEL_DECL void hook_backward(const std::vector<torch::Tensor>& outputs, std::size_t u);

  // Backward has reached the unit's output: its parameters again, and gradients to add into.
  ACCEL_DECL void prepare_backward(std::size_t u);

  // Autograd accumulated one of flat parameter f's gradients; the unit's last one finishes its
  // backward: its full parameters freed, and on the window's last micro-step the finished units
  // next in the sending order reduce-scattered.
  ACCEL_DECL void gradient_arrived(std::size_t f, std::size_t /*index*/);

  // Unit u's gradients reduce-scattered into its shards (zeros where none arrived on this rank):
  // started, after the unit sent before it landed. One unit's reduce-scatters are in flight at a
  // time, so that they overlap the next unit's backward (over c10d as over shared memory) while
  // the full gradients held stay those of two units.
  ACCEL_DECL void send(std::size_t u);
  // The reduce-scatters in flight waited for, added to their shards, their full gradients freed.
  ACCEL_DECL void land_sent();

  // The shards changed: a full copy still gathered (a forward whose backward never ran) is
  // stale, so the next forward gathers again.
  ACCEL_DECL void after_shard_step(const std::vector<std::size_t>& flats);

  std::vector<Unit> units_;
  std::vector<std::size_t> unit_of_;  // per flat parameter
  // Per flat parameter: its gather in flight, the narrowed gather's landing buffer until it is
  // widened, and whether its full buffer holds narrowed (rounded) values.
  std::vector<runtime::ProcessGroup::PendingCollective> gathering_;
  std::vector<torch::Tensor> narrow_landing_;
  std::vector<char> rounded_;
  std::optional<torch::Dtype> parameter_wire_;  // Options::sharded_communication.parameters
  bool prefetch_ = false;
  std::size_t prefetches_ = 0;
  std::vector<Model> models_;
  bool sync_ = true;  // this backward ends its window
  // Every unit in the order its gradients are reduce-scattered (zero3.hpp's top), and how many of
  // them this backward has sent.
  std::vector<std::size_t> send_order_;
  std::size_t sent_ = 0;
  std::vector<std::pair<std::size_t, runtime::ProcessGroup::PendingCollective>> in_flight_;
  std::vector<std::string> unit_names_;  // per unit, for errors
  detail::UnitOrderCheck unit_order_;
};

template <>
struct Strategy<Zero3> : FullyShardedStrategy {
  Strategy() : FullyShardedStrategy(Zero3::name) {}
};

}  // namespace accel::parallel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/zero3.ipp"
#endif
