// accel::Accelerator<Par, Prec, Acc>: the one class a training loop talks to.
//
//   using Strategy = accel::Accelerator<accel::Ddp, accel::Bf16, accel::GradAccum<4>>;
//   Strategy acc;
//   auto [model, optimizer, loader] = acc.prepare(net, adam, train_loader);
//   for (const auto& batch : loader) {
//     auto loss = torch::nll_loss(model(batch.image), batch.label);
//     acc.backward(loss);
//     optimizer.step();
//     optimizer.zero_grad();
//   }
//
// The policies are checked once, here (policy/rules.hpp); the class then compiles to one path
// for that composition, with no virtual dispatch.
//
// This header is the class and what it needs, with the behaviour of the default policies (Ddp,
// Fp32) only: every other policy's is a header of its own (parallel/zero2.hpp, zero3.hpp,
// fsdp.hpp; precision/bf16.hpp, fp16.hpp, fp8.hpp), which parallel::Strategy's and
// precision::Precision's primary templates name when it is missing. <accel/accelerator.hpp> adds
// all of them and the rest of what a training program uses (the launcher, parameter digests, the
// version); include this one and the policies' headers where a translation unit's compile time
// counts.
//
// The class is the training step's orchestration: prepare, backward and the gradient window,
// clipping, and the private handle protocol core/prepared.hpp's handles call (forward,
// optimizer_step, optimizer_zero_grad); its longer members are defined in
// core/accelerator_step.hpp and core/accelerator_prepare.hpp, included at the end. The rest of
// its surface comes from bases of one idea each, as the trackers do: core/collective_calls.hpp,
// state/accelerator_checkpoints.hpp, tracking/accelerator_tracking.hpp,
// core/main_process_calls.hpp, memory/release_memory.hpp and core/deprecated_members.hpp. Its
// state, and what does not depend on the policies, is its private base
// core/accelerator_core.hpp; tests and tools reach the strategy, the precision and the process
// group through accel::testing::internals (core/internals.hpp). What it asks of its strategy and
// precision is written down in parallel/contract.hpp and precision/contract.hpp.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/accelerator_core.hpp"
#include "core/collective_calls.hpp"
#include "core/deprecated_members.hpp"
#include "core/internals.hpp"
#include "core/main_process_calls.hpp"
#include "data/loader.hpp"
#include "detail/dependent_false.hpp"
#include "detail/error.hpp"
#include "detail/gradient_state.hpp"
#include "logging/logger.hpp"
#include "memory/release_memory.hpp"
#include "options.hpp"
#include "parallel/contract.hpp"
#include "parallel/ddp.hpp"
#include "parallel/full_parameters.hpp"
#include "policy.hpp"
#include "precision/contract.hpp"
#include "precision/autocast.hpp"
#include "precision/fp32.hpp"
#include "precision/precision.hpp"
#include "core/prepared.hpp"
#include "core/prepared_stream.hpp"
#include "profiling/profile_scope.hpp"
#include "tracking/timeline.hpp"
#include "runtime/environment.hpp"
#include "runtime/collectives.hpp"
#include "runtime/process_group.hpp"
#include "state/accelerator_checkpoints.hpp"
#include "state/automatic_checkpoints.hpp"
#include "state/checkpoint_view.hpp"
#include "tracking/accelerator_tracking.hpp"

namespace accel {

using runtime::ReduceOp;

/// The one class a training loop talks to, for one composition of a parallelism (Par), a
/// precision (Prec) and an accumulation (Acc) policy (docs/reference/accelerator.md, docs/concepts/policies.md).
template <class Par = Ddp, class Prec = Fp32, class Acc = GradAccum<1>>
class Accelerator
    : private detail::AcceleratorCore,  // what every Accelerator holds (core/accelerator_core.hpp):
                                        // its state, and print() and to_device()
      public tracking::WithTrackers<Accelerator<Par, Prec, Acc>>,      // init_trackers, log
      public detail::WithCollectives<Accelerator<Par, Prec, Acc>>,     // gather, reduce, ...
      public state::WithCheckpoints<Accelerator<Par, Prec, Acc>>,      // save_state, ...
      public detail::WithMainProcessCalls<Accelerator<Par, Prec, Acc>>,  // on_main_process
      public detail::WithReleaseMemory<Accelerator<Par, Prec, Acc>>,     // release_memory
      public detail::WithDeprecatedMembers<Accelerator<Par, Prec, Acc>> {
  using checked = policy::Checked<Par, Prec, Acc>;
  // The behaviour behind each policy meets its contract (parallel/contract.hpp,
  // precision/contract.hpp), or the role that falls short is named here; the compiler then goes
  // on with a stand-in (Ddp, Fp32), so that the message is the one error.
  static constexpr bool strategy_ok =
      parallel::strategy_meets_contract<typename checked::parallelism>();
  static constexpr bool precision_ok =
      precision::precision_meets_contract<typename checked::precision>();

 public:
  /// @{
  /// The policies as the composition rules checked them (policy/rules.hpp), and GradAccum's N.
  using parallelism_policy = std::conditional_t<strategy_ok, typename checked::parallelism, Ddp>;
  using precision_policy = std::conditional_t<precision_ok, typename checked::precision, Fp32>;
  using accumulation_policy = typename checked::accumulation;
  static constexpr int accumulation_steps = accumulation_policy::steps;
  /// @}

  /// Reads the environment, joins the run's process group and sets up the policies with
  /// `options`; a bad option is an accel::Error naming it.
  explicit Accelerator(Options options = {});

  // Prepared objects point back here: an Accelerator stays where it was made.
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // --- Where this process stands -----------------------------------------------------------------
  /// Where the model and batches go.
  const torch::Device& device() const { return device_; }
  /// This process's rank.
  int process_index() const { return process_.rank; }
  /// The world size.
  int num_processes() const { return process_.world_size; }
  /// The rank on this node.
  int local_process_index() const { return process_.local_rank; }
  /// Rank 0.
  bool is_main_process() const { return process_.rank == 0; }
  /// Local rank 0.
  bool is_local_main_process() const { return process_.local_rank == 0; }
  /// The options it was made with.
  const Options& options() const { return options_; }
  /// This process's logger (logging/logger.hpp): lines on the main process only unless a call
  /// passes accel::every_process; Options::logging sets its level and rank prefix.
  const logging::Logger& logger() const { return logger_; }
  /// The same, to change.
  logging::Logger& logger() { return logger_; }
  /// A fmt-formatted line, on the main process only.
  using AcceleratorCore::print;
  /// Any aggregate of tensors, on device().
  using AcceleratorCore::to_device;
  /// Starts the per-step timeline now (or replaces its options), as Options::timeline does at
  /// construction; every rank calls it.
  using AcceleratorCore::start_timeline;

  // --- prepare -----------------------------------------------------------------------------------
  /// Takes modules (holders or shared_ptrs), optimizers, LR schedulers and DataLoaders, in any
  /// order, and returns their prepared handles in the order given: one object, or a tuple for
  /// structured bindings. Preparing an object twice returns an equivalent handle.
  template <class... Objects>
  auto prepare(Objects&&... objects) {
    static_assert(sizeof...(Objects) > 0, "accel: prepare() needs at least one object");
    if constexpr (sizeof...(Objects) == 1) {
      if constexpr (std::is_void_v<decltype(prepare_one(std::forward<Objects>(objects)...))>) {
        return prepare_one(std::forward<Objects>(objects)...);  // none: its accel: message alone
      } else {
        auto prepared = prepare_one(std::forward<Objects>(objects)...);
        // Options::checkpoints.resume and the periodic saves (state/automatic_checkpoints.hpp).
        after_prepare_checkpoints(*this, state::CheckpointCode{});
        return prepared;
      }
    } else {
      auto prepared = std::tuple{prepare_one(std::forward<Objects>(objects))...};
      after_prepare_checkpoints(*this, state::CheckpointCode{});
      return prepared;
    }
  }

  // --- The training step -------------------------------------------------------------------------
  /// Backpropagates loss scaled for accumulation (1/N, or 1/k in a last window of k < N batches),
  /// then by the precision policy (Fp16: the window's loss scale). Several backward() calls on
  /// one batch share its micro-step (gradient_state.hpp).
  void backward(const torch::Tensor& loss);

  /// Token-weighted accumulation: loss_sum is a micro-batch's loss summed (not averaged) over
  /// `tokens` counted items (non-padding target tokens, say; 0 for a batch of padding only). The
  /// window's gradient is that of one batch of all its tokens on every rank and micro-step:
  /// sum of grad(loss_sum) / the window's tokens over every rank, whatever their split, and the
  /// short last window of an epoch needs no 1/k either. backward() adds the sums (scaled by the
  /// precision policy only); on the window's last micro-step the first of clip_grad_norm(),
  /// unscale_gradients() and optimizer.step() all-gathers the ranks' token counts (one integer
  /// each), adds them up, checked, and divides the gradients by the sum. A count beyond
  /// std::int64_t, on a rank or summed over the window or the ranks, is an error naming the
  /// counts. A window takes one kind of loss: backward(loss) in it too is an error, as is a window
  /// with no token on any rank.
  template <std::integral Count>
    requires(!std::same_as<Count, bool>)
  void backward(const torch::Tensor& loss_sum, Count tokens);
  /// A token count that is not an integer: a compile error that says so.
  template <class Count>
    requires(!std::integral<Count> || std::same_as<Count, bool>)
  void backward(const torch::Tensor& /*loss_sum*/, const Count& /*tokens*/) {
    static_assert(detail::dependent_false<Count>,
                  "accel: backward(loss_sum, tokens) takes the token count as an integer "
                  "(std::int64_t, int, ...), e.g. mask.sum().item<std::int64_t>(): the window's "
                  "gradients are divided by the counts summed over its micro-steps and ranks");
  }

  /// RAII: one micro-step in a loop without a prepared loader, as Accelerate's accumulate():
  /// every backward() inside the scope belongs to it. Inside a prepared loader's loop the batch
  /// already is the micro-step, and the scope changes nothing.
  class [[nodiscard]] MicroStep {
   public:
    ~MicroStep() {
      if (owned_ != nullptr) owned_->end_micro_step();
    }
    MicroStep(const MicroStep&) = delete;
    MicroStep& operator=(const MicroStep&) = delete;

   private:
    friend class Accelerator;
    explicit MicroStep(detail::GradientState* owned) : owned_(owned) {}
    detail::GradientState* owned_;
  };
  /// Opens a MicroStep scope (see MicroStep).
  MicroStep accumulate() {
    if (gradients_.in_micro_step()) return MicroStep(nullptr);
    gradients_.begin_micro_step();
    return MicroStep(&gradients_);
  }

  /// True on the micro-step that ends an accumulation window (every step without accumulation).
  bool sync_gradients() const { return gradients_.sync_gradients(); }
  /// True while the batch in hand is the last of its epoch (evaluation loaders included).
  bool end_of_data() const { return end_of_data_; }
  /// Where the batch in hand stands in its accumulation window, as Accelerate's GradientState.
  struct GradientWindow {
    int position = 1;  ///< 1..length
    int length = 1;    ///< GradAccum's N, or k < N in an epoch's short last window
    bool sync_gradients = true;  ///< position == length: the optimizer steps on this micro-step
  };
  /// The window the batch in hand belongs to.
  GradientWindow gradient_state() const {
    return {gradients_.position_in_window(), gradients_.window_length(),
            gradients_.sync_gradients()};
  }

  /// Clips the gradients of every prepared model so that their global norm is at most max_norm,
  /// and returns the norm before clipping. Mid-window it only measures: the gradients are not
  /// complete yet.
  double clip_grad_norm(double max_norm, double norm_type = 2.0) {
    return clip_grad_norm(prepared_parameters(), max_norm, norm_type);
  }
  /// The same, over `parameters` instead of every prepared model's.
  double clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm,
                        double norm_type = 2.0);

  /// Clamps every gradient element of every prepared model to [-clip_value, clip_value], as
  /// torch.nn.utils.clip_grad_value_, on the gradients the strategy exposes for clipping (a
  /// sharded strategy's shard: clamping is element-wise, so no rank needs another's). The
  /// window's gradients are unscaled (and divided by its tokens) first, exactly as for
  /// clip_grad_norm; mid-window it does nothing, since clamping partial sums is not clamping
  /// their total. Every rank calls it, as clip_grad_norm.
  void clip_grad_value(double clip_value) { clip_grad_value(prepared_parameters(), clip_value); }
  /// The same, over `parameters` instead of every prepared model's.
  void clip_grad_value(const std::vector<torch::Tensor>& parameters, double clip_value);

  /// Loss scaling (Fp16): divides the gradients of every prepared optimizer by the loss scale, at
  /// most once per window, as torch.amp.GradScaler.unscale_(); clip_grad_norm() and
  /// optimizer.step() call it, so only code that reads gradients before either needs it. Nothing
  /// under other precisions, and before the window's last micro-step. After
  /// backward(loss_sum, tokens) it first divides the window's gradients by its token count (once).
  void unscale_gradients();
  /// Loss scaling: whether a prepared optimizer's last step was skipped because its gradients
  /// held inf or nan on some rank (then the parameters, the optimizer's state and a prepared
  /// scheduler did not move). Always false without loss scaling.
  bool optimizer_step_was_skipped() const { return precision_.step_was_skipped(); }
  /// The factor this window's losses are multiplied by before backward (1 without loss scaling).
  double loss_scale() const { return precision_.loss_scale(); }
  /// Loss scaling: the optimizer steps skipped since construction because their gradients held
  /// inf or nan on some rank (0 without loss scaling).
  std::int64_t skipped_steps() const {
    if constexpr (requires { precision_.skipped_steps(); })
      return precision_.skipped_steps();
    else
      return 0;
  }

  // --- Profiling (docs/how-to/profiling.md) ---------------------------------------------------------
  /// Records accel's spans (forward, backward, each collective issued and waited for, the
  /// optimizer step, the data wait; with options.torch_ops, libtorch's operators too) on the
  /// schedule of `options`, for as long as the returned scope lives, into trace_rank<r>.json: in
  /// options.output_dir, else the open run's folder, else ./profile. Every rank calls it (with a
  /// run open and no output_dir, the main process's run folder is broadcast).
  profiling::Profile profile(const ProfileOptions& options = {}) {
    return start_profile(options, this->run_dir(), this->run_tracker().is_open());
  }

  /// Ends the run (tracking/accelerator_tracking.hpp), logging the timeline's last steps first.
  /// A background save still under way is written and committed first; its failure is this
  /// call's error.
  void end_training();

  // --- Utilities ---------------------------------------------------------------------------------
  /// Seeds every torch generator (CPU and CUDA) of this process.
  void set_seed(std::uint64_t seed) { torch::manual_seed(seed); }

  /// The precision policy's autocast, for code outside a prepared model's forward.
  precision::Autocast<precision_policy> autocast() const {
    return precision::Autocast<precision_policy>(device_);
  }

  /// RAII: a model's full parameters for code outside its forward (evaluation by hand, export, a
  /// digest). Where parameters are sharded at rest (Zero3, Fsdp<FullShard>) every rank gathers them
  /// here, so every rank must enter the scope, and at its end writes its part of any change back
  /// to its shard and frees them again. Elsewhere parameters are always whole and it does nothing.
  /// Takes the prepared handle, the holder or the shared_ptr.
  using FullParameters = parallel::FullParameters<parallel::Strategy<parallelism_policy>>;
  /// Opens a FullParameters scope on `model` (see FullParameters).
  template <class Model>
  FullParameters full_parameters(Model& model) {
    return FullParameters(strategy_, static_cast<torch::nn::Module&>(*model));
  }

  /// Bytes of parameters, gradients and optimizer state this rank holds for the prepared models
  /// and optimizers, each storage counted once (detail/memory_counter.hpp): under Zero2 the
  /// gradients and optimizer state are about 1/W of Ddp's, under Zero3 the parameters too.
  MemoryUse memory_use() const;

 private:
  // --- Called by the prepared handles (core/prepared.hpp), the bases and nothing else ------------
  template <class, class>
  friend class PreparedModel;
  template <class, class>
  friend class PreparedOptimizer;
  template <class, class>
  friend class PreparedScheduler;
  template <class>
  friend struct state::AutomaticCheckpoints;  // periodic saves and the resume at prepare()
  friend class detail::WithReleaseMemory<Accelerator>;  // the background save's snapshot
  friend class detail::WithCollectives<Accelerator>;    // the process group
  friend class state::WithCheckpoints<Accelerator>;     // checkpoint_view(), the precision
  template <class>
  friend class testing::Internals;  // the strategy, the precision, the group, for tests

  // The handle protocol and the training step's checks, each described where it is defined
  // (core/accelerator_step.hpp).
  template <class Holder, class... Args>
  auto forward(Holder& module, Args&&... args);
  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer);
  template <class Optimizer>
  void optimizer_zero_grad(Optimizer& optimizer);
  void log_timeline();
  void check_last_window_used() const;
  void divide_by_window_tokens();

  // The prepare path (core/accelerator_prepare.hpp).
  template <class T>
  auto prepare_one(T&& object);
  void register_model(const std::shared_ptr<torch::nn::Module>& module);
  // Where batches are dealt: every rank of a tensor-parallel group (N consecutive ranks) takes
  // its group's batch; without tensor parallelism each rank is its own.
  static constexpr int ranks_per_batch = std::max(1, tensor_parallel_degree_v<parallelism_policy>);
  int data_rank() const { return process_.rank / ranks_per_batch; }
  int data_ranks() const { return process_.world_size / ranks_per_batch; }

  // What the checkpoint calls (state/accelerator_checkpoints.hpp) hand to state::CheckpointIO
  // (state/checkpoint_view.hpp): the references a checkpoint reads and sets, and nothing else of
  // this class's private state.
  state::CheckpointView<parallel::Strategy<parallelism_policy>> checkpoint_view() {
    return {.group = group_.get(),
            .rank = process_.rank,
            .world_size = process_.world_size,
            .options = options_,
            .policies = {parallelism_policy::name, precision_policy::name, accumulation_steps,
                         ranks_per_batch},
            .strategy = strategy_,
            .models = models_,
            .optimizers = optimizers_,
            .schedulers = schedulers_,
            .loaders = loaders_,
            .custom_objects = custom_objects_,
            .window = gradients_,
            .completed_steps = completed_steps_,
            .save_state_pre_hooks = save_state_pre_hooks_,
            .load_state_pre_hooks = load_state_pre_hooks_,
            .runner = &checkpoints_};
  }

  parallel::Strategy<parallelism_policy> strategy_;
  precision::Precision<precision_policy> precision_;
  // Declared last, so destroyed first: a background save ends before anything else goes.
  state::CheckpointRunner checkpoints_;
};

}  // namespace accel

// The members defined outside the class.
#include "core/accelerator_prepare.hpp"
#include "core/accelerator_step.hpp"
