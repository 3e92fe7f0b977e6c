// accel::Accelerator<Par, Prec, Acc>: the one class a training loop talks to.
// Longer than one header should be: it holds the whole public surface of the class (prepare,
// the step, checkpoints' entry points, collectives, the handle protocol) over its policy-free
// base core/accelerator_core.hpp; moving the collectives into a mixin, as the trackers are, and
// the plumbing out of the public surface is the planned split (docs/dev/architecture.md).
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
// Longer than accel's headers should be because it is one class template: its public surface
// (prepare, backward, the collectives, trackers, profiling, the checkpoints' entry points) and
// the private handle protocol that only core/prepared.hpp's handles call (forward, optimizer_step,
// optimizer_zero_grad). Each step of the loop reads as calls into the strategy, the precision
// and the gradient state; what is not the class's own orchestration lives beside it
// (core/accelerator_core.hpp: the state, start-up and calls that do not depend on the policies, the
// loaders' protocol among them; runtime/collectives.hpp, runtime/same_model.hpp,
// parallel/detail/clip.hpp, state/checkpoint_io.hpp). What it asks of its strategy and precision
// is written down once, in parallel/contract.hpp and precision/contract.hpp.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/accelerator_core.hpp"
#include "core/main_process_calls.hpp"
#include "data/loader.hpp"
#include "data/shard.hpp"
#include "data/tensor_tree.hpp"
#include "detail/bytes.hpp"
#include "detail/deferred_build.hpp"
#include "detail/dependent_false.hpp"
#include "detail/error.hpp"
#include "detail/gradient_state.hpp"
#include "detail/small_tensor.hpp"
#include "logging/logger.hpp"
#include "memory/release_memory.hpp"
#include "options.hpp"
#include "parallel/contract.hpp"
#include "parallel/detail/clip.hpp"
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
#include "profiling/span.hpp"
#include "tracking/timeline.hpp"
#include "runtime/cpu_heap.hpp"
#include "runtime/environment.hpp"
#include "runtime/any_rank.hpp"
#include "runtime/bootstrap.hpp"
#include "runtime/collectives.hpp"
#include "runtime/process_group.hpp"
#include "runtime/progress_record.hpp"
#include "runtime/same_model.hpp"
#include "state/automatic_checkpoints.hpp"
#include "state/checkpoint_io_declaration.hpp"
#include "state/checkpoint_view.hpp"
#include "state/custom_objects.hpp"
#include "state/dtype_conversion.hpp"
#include "state/writable_folder.hpp"
#include "state/loader_position.hpp"
#include "tracking/accelerator_tracking.hpp"

namespace accel {

using runtime::ReduceOp;

/// The one class a training loop talks to, for one composition of a parallelism (Par), a
/// precision (Prec) and an accumulation (Acc) policy (docs/reference/accelerator.md, docs/concepts/policies.md).
template <class Par = Ddp, class Prec = Fp32, class Acc = GradAccum<1>>
class Accelerator
    : public detail::AcceleratorCore,  // what every Accelerator holds (core/accelerator_core.hpp):
                                       // its state, and print() and to_device()
      public tracking::WithTrackers<Accelerator<Par, Prec, Acc>>,  // init_trackers, log
      public detail::WithMainProcessCalls<Accelerator<Par, Prec, Acc>>,  // on_main_process
      public detail::WithReleaseMemory<Accelerator<Par, Prec, Acc>> {    // release_memory
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
  explicit Accelerator(Options options = {})
      : AcceleratorCore(without_tensor_parallel_checkpoints(std::move(options)),
                        accumulation_steps, shards_parameters_v<parallelism_policy>) {
    if (options_.offload.any() && !parallel::Strategy<parallelism_policy>::can_offload)
      detail::fail("{}: Options::offload moves optimizer state (and Zero3's parameter shards) to "
                   "the CPU, and {} keeps them whole on every rank's device; use Zero2, Zero3 or "
                   "Fsdp<FullShard|ShardGradOp|HybridShard> to offload, or leave Options::offload "
                   "off",
                   parallelism_policy::name, parallelism_policy::name);
    state::check_automatic_checkpoint_options(options_.checkpoints);
    precision_.attach(group_.get(), options_, device_);
    strategy_.attach(group_.get(), options_);
    if (options_.seed) set_seed(*options_.seed);
  }

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
  /// The variables read.
  const runtime::Environment& environment() const { return environment_; }
  /// This process's logger (logging/logger.hpp): lines on the main process only unless a call
  /// passes accel::every_process; Options::logging sets its level and rank prefix.
  const logging::Logger& logger() const { return logger_; }
  /// The same, to change.
  logging::Logger& logger() { return logger_; }
  /// The process group; null on one process.
  runtime::ProcessGroup* process_group() const { return group_.get(); }
  /// The parallelism strategy, read-only: what it keeps (Zero2's flat parameters and the
  /// optimizers over this rank's shard), for tests and tools.
  const parallel::Strategy<parallelism_policy>& strategy() const { return strategy_; }

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
  void backward(const torch::Tensor& loss) {
    const profiling::Span span(profiling::Phase::backward, "backward");
    gradients_.on_backward();
    check_last_window_used();
    gradients_.on_mean_loss();
    precision_.on_backward({gradients_.micro_steps(), gradients_.position_in_window()});
    const bool sync = gradients_.sync_gradients();
    strategy_.before_backward(sync);
    const torch::Tensor averaged =
        gradients_.window_length() == 1 ? loss : loss * gradients_.accumulation_factor();
    precision_.scale_loss(averaged).backward();
    strategy_.after_backward(sync);
    if (sync) unused_window_ = gradients_.micro_steps();
  }

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
  void backward(const torch::Tensor& loss_sum, Count tokens) {
    const profiling::Span span(profiling::Phase::backward, "backward");
    gradients_.on_backward();
    check_last_window_used();
    gradients_.on_token_loss(tokens);
    precision_.on_backward({gradients_.micro_steps(), gradients_.position_in_window()});
    const bool sync = gradients_.sync_gradients();
    strategy_.before_backward(sync);
    precision_.scale_loss(loss_sum).backward();
    strategy_.after_backward(sync);
    if (sync) unused_window_ = gradients_.micro_steps();
  }
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
                        double norm_type = 2.0) {
    // Loss scaling: the window's gradients are unscaled first (once); mid-window they are still
    // scaled, and only their measure is divided back.
    if (sync_gradients()) unscale_gradients();
    return parallel::detail::clip_grad_norm(strategy_, parameters, max_norm, norm_type,
                                            sync_gradients()) /
           (sync_gradients() ? 1.0 : precision_.loss_scale());
  }

  /// Clamps every gradient element of every prepared model to [-clip_value, clip_value], as
  /// torch.nn.utils.clip_grad_value_, on the gradients the strategy exposes for clipping (a
  /// sharded strategy's shard: clamping is element-wise, so no rank needs another's). The
  /// window's gradients are unscaled (and divided by its tokens) first, exactly as for
  /// clip_grad_norm; mid-window it does nothing, since clamping partial sums is not clamping
  /// their total. Every rank calls it, as clip_grad_norm.
  void clip_grad_value(double clip_value) { clip_grad_value(prepared_parameters(), clip_value); }
  /// The same, over `parameters` instead of every prepared model's.
  void clip_grad_value(const std::vector<torch::Tensor>& parameters, double clip_value) {
    parallel::detail::check_clip_value(clip_value);
    if (!sync_gradients()) return;
    unscale_gradients();
    parallel::detail::clip_grad_value(strategy_, parameters, clip_value);
  }

  /// Loss scaling (Fp16): divides the gradients of every prepared optimizer by the loss scale, at
  /// most once per window, as torch.amp.GradScaler.unscale_(); clip_grad_norm() and
  /// optimizer.step() call it, so only code that reads gradients before either needs it. Nothing
  /// under other precisions, and before the window's last micro-step. After
  /// backward(loss_sum, tokens) it first divides the window's gradients by its token count (once).
  void unscale_gradients() {
    if (!sync_gradients()) return;
    divide_by_window_tokens();
    for (auto* optimizer : optimizers_) precision_.unscale(strategy_, *optimizer);
  }
  /// Loss scaling: whether a prepared optimizer's last step was skipped because its gradients
  /// held inf or nan on some rank (then the parameters, the optimizer's state and a prepared
  /// scheduler did not move). Always false without loss scaling.
  bool optimizer_step_was_skipped() const { return precision_.step_was_skipped(); }
  /// The factor this window's losses are multiplied by before backward (1 without loss scaling).
  double loss_scale() const { return precision_.loss_scale(); }
  /// The precision policy's behaviour: its options and report (Fp16: skipped_steps()).
  const precision::Precision<precision_policy>& precision() const { return precision_; }
  /// What a checkpoint saves of the precision policy (Fp16: precision::LossScaleState, the scale
  /// and growth tracker; an empty struct for Fp32 and Bf16), and how it is put back.
  auto precision_state() const { return precision_.state(); }
  /// Puts back a state precision_state() returned.
  void load_precision_state(
      const typename precision::Precision<precision_policy>::state_type& state) {
    precision_.load_state(state);
  }

  // --- Checkpoints (state/checkpoint_io.hpp; docs/how-to/resume.md) --------------------------------
  /// Every rank calls them: under the sharded strategies each rank saves and loads its own
  /// shards, so guarding save_state() with is_main_process() is a bug.
  ///
  /// Saves every prepared model, optimizer and scheduler, the precision state, each rank's RNG
  /// states, every prepared loader's position, the accumulation window (and, mid-window, the
  /// gradients collected so far), completed_steps() and the registered objects into `folder`,
  /// committed atomically (a crash leaves the previous checkpoint whole). Without a folder: the
  /// next checkpoint_<n> under Options::checkpoints.directory, keeping at most total_limit.
  /// SaveMode::async returns once this rank's state is copied into host memory and writes and
  /// commits it in the background (docs/how-to/fault-tolerance.md). Returns the folder written.
  std::filesystem::path save_state(const std::optional<std::filesystem::path>& folder = {},
                                   SaveMode mode = SaveMode::sync) {
    return state::CheckpointIO<Accelerator>::save_state(checkpoint_view(), precision_, folder,
                                                        mode);
  }
  /// The same, into the next checkpoint_<n>.
  std::filesystem::path save_state(SaveMode mode) { return save_state(std::nullopt, mode); }
  /// Loads what save_state() wrote; every file is read and checked before any object changes, so
  /// on an error the objects are as they were and the message names the file (and tensor).
  /// Without a folder: the newest committed checkpoint under Options::checkpoints.directory.
  /// Returns the folder loaded.
  std::filesystem::path load_state(const std::optional<std::filesystem::path>& folder = {}) {
    return state::CheckpointIO<Accelerator>::load_state(checkpoint_view(), precision_, folder);
  }
  /// Consolidated weights of a prepared model as safetensors (gathered from the shards; the main
  /// process writes), split into files of at most max_shard_bytes with an index, as the
  /// HuggingFace ecosystem lays them out.
  template <class Model>
  void save_model(Model& model, const std::filesystem::path& folder,
                  std::uint64_t max_shard_bytes = 10ULL << 30) {
    state::CheckpointIO<Accelerator>::save_model(
        checkpoint_view(), static_cast<torch::nn::Module&>(*model), folder, max_shard_bytes);
  }
  /// Weights from such a folder (or one other tools wrote) into a prepared model. strict: every
  /// parameter and buffer must be there and nothing else (the error lists what is missing and
  /// unexpected); otherwise the names found are loaded and the others left as they are.
  /// `conversion`: what happens to a weight stored in another dtype (state/dtype_conversion.hpp).
  template <class Model>
  void load_model(Model& model, const std::filesystem::path& folder, bool strict = true,
                  DtypeConversion conversion = DtypeConversion::checked) {
    state::CheckpointIO<Accelerator>::load_model(
        checkpoint_view(), static_cast<torch::nn::Module&>(*model), folder, strict, conversion);
  }
  /// An object of yours saved with every checkpoint (by the main process) and loaded on every
  /// rank: anything with torch's save(OutputArchive&) / load(InputArchive&), or a trivially
  /// copyable struct. Register in the same order before load_state(); it must outlive this.
  template <state::Checkpointable T>
  void register_for_checkpointing(T& object) {
    custom_objects_.push_back(state::custom_object(object));
  }
  /// A function of yours called with the checkpoint folder by save_state(), on every rank, before
  /// any file of the checkpoint is written (fill a registered object with what it should save,
  /// say), as Accelerate's register_save_state_pre_hook. The folder is the one save_state()
  /// returns; accel commits it whole at the end, so keep files of your own elsewhere. Hooks run
  /// in registration order; one that throws stops the save on every rank, before anything is
  /// written.
  void register_save_state_pre_hook(std::function<void(const std::filesystem::path&)> hook) {
    add_pre_hook(save_state_pre_hooks_, std::move(hook), "register_save_state_pre_hook");
  }
  /// The same for load_state(): called with the folder it is about to read, on every rank,
  /// before any file is read or any object changes.
  void register_load_state_pre_hook(std::function<void(const std::filesystem::path&)> hook) {
    add_pre_hook(load_state_pre_hooks_, std::move(hook), "register_load_state_pre_hook");
  }
  /// Accumulation windows completed (optimizer steps taken, whether or not the loss scaler
  /// skipped them), restored by load_state(): a resumed loop runs until it reaches its total.
  std::int64_t completed_steps() const { return completed_steps_; }
  /// The checkpoint Options::checkpoints.resume loaded, if it loaded one.
  const std::optional<std::filesystem::path>& resumed_from() const {
    return checkpoints_.resumed_from;
  }

  // --- Profiling (docs/how-to/profiling.md) ---------------------------------------------------------
  /// Records accel's spans (forward, backward, each collective issued and waited for, the
  /// optimizer step, the data wait; with options.torch_ops, libtorch's operators too) on the
  /// schedule of `options`, for as long as the returned scope lives, into trace_rank<r>.json: in
  /// options.output_dir, else the open run's folder, else ./profile. Every rank calls it (with a
  /// run open and no output_dir, the main process's run folder is broadcast).
  profiling::Profile profile(const ProfileOptions& options = {}) {
    return start_profile(options, this->tracker().run_dir(), this->tracker().is_open());
  }

  // start_timeline(TimelineOptions): the core's (core/accelerator_core.hpp).

  /// Ends the run (tracking/accelerator_tracking.hpp), logging the timeline's last steps first.
  /// A background save still under way is written and committed first; its failure is this
  /// call's error.
  void end_training() {
    if (const std::string failure = checkpoints_.background.wait(); !failure.empty())
      throw Error(failure);
    if (recorder_ != nullptr && recorder_->timeline()) {
      recorder_->close_pending_step();
      log_timeline();
    }
    tracking::WithTrackers<Accelerator>::end_training();
  }

  // --- Collectives: every rank calls them, in the same order. On one process they return their
  // argument (gather: as if gathered from one rank). Tensors may sit in any aggregate. --------------

  /// Blocks until every rank gets here.
  void wait_for_everyone() {
    const runtime::ProcessGroup::Caller caller(group_.get(), "wait_for_everyone");
    if (group_) group_->barrier();
  }

  /// RAII: the processes that go first run the scope, the others wait at its start until those
  /// have left it. Each process passes one barrier (at the start or at the end), so every
  /// process must enter the scope.
  class [[nodiscard]] GoesFirst {
   public:
    /// A process with `goes_first` runs the scope first; the others wait here.
    GoesFirst(Accelerator& accelerator, bool goes_first)
        : accelerator_(accelerator), goes_first_(goes_first) {
      if (!goes_first_) accelerator_.wait_for_everyone();
    }
    ~GoesFirst() noexcept(false) {
      if (goes_first_) accelerator_.wait_for_everyone();
    }
    GoesFirst(const GoesFirst&) = delete;
    GoesFirst& operator=(const GoesFirst&) = delete;

   private:
    Accelerator& accelerator_;
    bool goes_first_;
  };
  /// Accelerate's name for the scope.
  using MainProcessFirst = GoesFirst;
  /// The main process runs the scope first, the others after it has left it (download or
  /// preprocess once, then read the result everywhere).
  GoesFirst main_process_first() { return GoesFirst(*this, is_main_process()); }
  /// The same per node: each node's local main process (LOCAL_RANK 0) runs the scope first, then
  /// the node's other processes (prepare a node-local cache once per node). With the job's
  /// barrier, as Accelerate does: the local main processes of all nodes run it at once, and the
  /// others start once all of them have left it.
  GoesFirst local_main_process_first() { return GoesFirst(*this, is_local_main_process()); }

  /// Every tensor of `value` as rank `root` holds it.
  template <class T>
  T broadcast(const T& value, int root = 0) {
    return runtime::broadcast(group_.get(), value, root);
  }

  /// Every tensor of `value` reduced element-wise over the ranks (sum, mean, max or min).
  template <class T>
  T reduce(const T& value, ReduceOp op = ReduceOp::sum) {
    return runtime::reduce(group_.get(), value, op);
  }

  /// Every tensor of `value` concatenated along dimension 0 over the ranks, in rank order. The
  /// first dimension may differ between ranks; 0-dim tensors become one row per rank.
  template <class T>
  T gather(const T& value) {
    return runtime::gather(group_.get(), value);
  }

  /// gather, without the duplicates that even_batches added to the last round of the epoch
  /// (exactly those), so that metrics see every sample once.
  template <class T>
  T gather_for_metrics(const T& value) {
    const runtime::ProcessGroup::Caller caller(group_.get(), "gather_for_metrics");
    return runtime::gather_first(group_.get(), value, end_of_data_ ? real_in_final_round_ : -1);
  }

  /// One value per rank, in rank order. T: a trivially copyable type, std::string, or a
  /// std::vector of a trivially copyable type.
  template <class T>
  std::vector<T> gather_object(const T& value) {
    return runtime::gather_object(group_.get(), value);
  }

  /// Pads dimension `dim` of every tensor of `value` to the largest size among the ranks.
  template <class T>
  T pad_across_processes(const T& value, std::int64_t dim = 0, double pad_value = 0.0,
                         bool pad_first = false) {
    return runtime::pad_across_processes(group_.get(), value, dim, pad_value, pad_first);
  }

  /// This rank's contiguous share of `items` (a std::vector or a tensor's first dimension):
  /// shares differ by at most one item, the first ranks taking the extra ones.
  template <class T>
  T split_between_processes(const T& items) {
    return runtime::split_between_processes(group_.get(), items);
  }

  /// A flag any rank may raise (for example on a diverging loss) and every rank then sees at its
  /// next check_trigger(), which lowers it again.
  void set_trigger() { trigger_ = true; }
  /// Whether any rank raised the flag since the last check; every rank calls it.
  bool check_trigger() {
    const bool raised = runtime::any_rank(group_.get(), trigger_);
    if (raised) trigger_ = false;
    return raised;
  }

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
  MemoryUse memory_use() const {
    state::MemoryCounter counter;
    strategy_.count_memory(counter);
    for (const auto& module : models_)
      for (const auto& p : module->parameters()) {
        counter.parameter(p);
        counter.gradient(p.grad());
      }
    for (const auto* optimizer : optimizers_) counter.optimizer_state(*optimizer);
    MemoryUse use = counter.use();
    use.checkpoint_snapshot = checkpoints_.background.snapshot_bytes();
    return use;
  }

 private:
  // --- Called by the prepared handles (core/prepared.hpp) and nothing else ---------------------------
  template <class, class>
  friend class PreparedModel;
  template <class, class>
  friend class PreparedOptimizer;
  template <class, class>
  friend class PreparedScheduler;
  template <class>
  friend struct state::AutomaticCheckpoints;  // periodic saves and the resume at prepare()
  friend class detail::WithReleaseMemory<Accelerator>;  // the background save's snapshot

  template <class Holder, class... Args>
  auto forward(Holder& module, Args&&... args) {
    const profiling::Span span(profiling::Phase::forward, "forward");
    auto& whole = static_cast<torch::nn::Module&>(*module);
    strategy_.before_forward(whole);
    precision::Autocast<precision_policy> guard(device_);
    auto outputs = precision::outputs_to_fp32<precision_policy>(
        module->forward(std::forward<Args>(args)...));
    strategy_.after_forward(whole, outputs);
    return outputs;
  }

  // On the window's last micro-step, unless the precision policy skips it (Fp16: inf/nan in the
  // gradients on some rank).
  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    if (!sync_gradients()) return;
    {
      const profiling::Span span(profiling::Phase::optimizer, "optimizer step");
      unused_window_.reset();
      if (counted_micro_step_ != gradients_.micro_steps()) {  // once per window, for all optimizers
        counted_micro_step_ = gradients_.micro_steps();
        ++completed_steps_;
      }
      divide_by_window_tokens();
      if (precision_.may_step(strategy_, optimizer)) strategy_.optimizer_step(optimizer);
    }
    if (process_.rank == 0) runtime::record_steps(completed_steps_);  // for the launcher
    if (recorder_ != nullptr) {
      recorder_->optimizer_stepped(completed_steps_);
      if (recorder_->timeline() &&
          recorder_->steps_ready() >= static_cast<std::size_t>(options_.timeline.every))
        log_timeline();
    }
  }

  // The timeline's finished steps, logged while a run is open (take_timeline_rows).
  void log_timeline() {
    for (const auto& row : take_timeline_rows(this->tracker().is_open()))
      this->log(row.metrics, row.step);
  }

  // Zeroes gradients (in place, parallel/replicated.hpp) unless a window is still collecting them.
  template <class Optimizer>
  void optimizer_zero_grad(Optimizer& optimizer) {
    if (gradients_.collecting()) return;
    unused_window_.reset();
    strategy_.zero_grad(optimizer);
  }

  // Under Zero2, Zero3 and the sharding Fsdp kinds a window's gradients live in accel's shards:
  // only a prepared optimizer's step() applies them and only its zero_grad() drops them. A
  // program that steps the torch optimizer itself (or one never passed to prepare()) would
  // train nothing without a word, so the next micro-step's backward() stops it. Several
  // backward() calls on one micro-step (a GAN's two losses) are fine.
  void check_last_window_used() const {
    if constexpr (shards_gradients_v<parallelism_policy>) {
      if (unused_window_ && *unused_window_ != gradients_.micro_steps())
        detail::fail(
            "backward(): the gradients of the last window (micro-step {}) were neither applied "
            "nor dropped by a prepared optimizer: under {} they live in accel's shards, not in "
            "the parameters' .grad, so a torch::optim optimizer stepped directly (or one not "
            "passed to prepare()) changes nothing, and torch::nn::utils::clip_grad_norm_ sees "
            "no gradient. Call step() and zero_grad() on the optimizer prepare() returned, and "
            "accelerator.clip_grad_norm(max_norm) to clip (docs/reference/accelerator.md, \"The right "
            "doors\")",
            *unused_window_, parallelism_policy::name);
    }
  }

  template <class T>
  auto prepare_one(T&& object) {
    using Object = std::remove_cvref_t<T>;
    if constexpr (detail::is_prepared<Object>) {
      return Object(object);
    } else if constexpr (detail::ModuleHandle<Object>) {
      register_model(detail::module_pointer(object));
      return PreparedModel<Accelerator, Object>(this, object);
    } else if constexpr (std::derived_from<Object, torch::optim::Optimizer>) {
      static_assert(std::is_lvalue_reference_v<T>,
                    "accel: prepare() keeps a pointer to the optimizer; pass a named optimizer "
                    "that outlives the Accelerator, not a temporary");
      strategy_.prepare_optimizer(object);
      if (std::find(optimizers_.begin(), optimizers_.end(), &object) == optimizers_.end())
        optimizers_.push_back(&object);
      return PreparedOptimizer<Accelerator, Object>(this, &object);
    } else if constexpr (detail::LrScheduler<Object>) {
      static_assert(std::is_lvalue_reference_v<T>,
                    "accel: prepare() keeps a pointer to the scheduler; pass a named scheduler "
                    "that outlives the Accelerator, not a temporary");
      if (std::find(schedulers_.begin(), schedulers_.end(), &object) == schedulers_.end())
        schedulers_.push_back(&object);
      return PreparedScheduler<Accelerator, Object>(this, &object);
    } else if constexpr (detail::is_data_loader<Object>) {
      static_assert(std::is_lvalue_reference_v<T>,
                    "accel: prepare() keeps a pointer to the DataLoader; pass a named loader "
                    "that outlives the Accelerator, not a temporary");
      // The loaders' protocol is the core's: one PreparedLoader per loader type, whatever the
      // policies.
      return PreparedLoader<detail::AcceleratorCore, Object>(
          this, &object, register_loader(object),
          data::Shard{data_rank(), data_ranks(), options_.even_batches, options_.split_batches});
    } else if constexpr (detail::is_streaming_loader<Object>) {
      static_assert(std::is_lvalue_reference_v<T>,
                    "accel: prepare() keeps a pointer to the StreamingLoader; pass a named loader "
                    "that outlives the Accelerator, not a temporary");
      return PreparedStreamingLoader<detail::AcceleratorCore, Object>(
          this, &object, register_loader(object), data_rank(), data_ranks(),
          options_.split_batches);
    } else {
      static_assert(detail::dependent_false<Object>,
                    "accel: prepare() takes modules (torch::nn::ModuleHolder or "
                    "std::shared_ptr<Module>), torch::optim optimizers, torch::optim::LRScheduler "
                    "schedulers, accel::DataLoader and accel::StreamingLoader; this argument is "
                    "none of them");
    }
  }

  // Refused before the core claims Options::checkpoints.directory, so that nothing is made
  // (state/checkpoint_io.hpp refuses the calls themselves).
  static Options without_tensor_parallel_checkpoints(Options options) {
    if (tensor_parallel_degree_v<parallelism_policy> > 0 &&
        state::automatic_checkpoints_asked(options.checkpoints))
      detail::fail("Options::checkpoints: tensor-parallel checkpoints are not supported yet "
                   "(under {}); leave every_steps, every_seconds and resume unset "
                   "(docs/how-to/tensor-parallel.md#limits)",
                   parallelism_policy::name);
    return options;
  }

  // Where batches are dealt: every rank of a tensor-parallel group (N consecutive ranks) takes
  // its group's batch; without tensor parallelism each rank is its own.
  static constexpr int ranks_per_batch = std::max(1, tensor_parallel_degree_v<parallelism_policy>);
  int data_rank() const { return process_.rank / ranks_per_batch; }
  int data_ranks() const { return process_.world_size / ranks_per_batch; }

  void register_model(const std::shared_ptr<torch::nn::Module>& module) {
    for (const auto& known : models_)
      if (known.get() == module.get()) return;
    const std::string label =
        fmt::format("prepared model #{} ({})", models_.size() + 1, module->name());
    // An empty build's tensors refuse operators outside prepare() (detail/unprepared_mark.hpp).
    const detail::UnpreparedAccess preparing;
    runtime::check_same_model_on_every_rank(group_.get(), *module, label);
    // An empty build (accel::deferred_init): replayed from rank 0's generator state, so every
    // rank has what an eager build broadcast from rank 0 has. A strategy that says
    // deferred_models (parallel/contract.hpp) materializes only this rank's shard; the others
    // (and one process) the whole model.
    if (const auto build = detail::deferred_build_of(*module)) {
      torch::Tensor state = build->generator_state().clone();
      if (group_ != nullptr) group_->broadcast(state);
      if constexpr (parallel::builds_deferred_models<parallel::Strategy<parallelism_policy>>) {
        if (group_ != nullptr) {
          precision_.prepare_model(module, label);
          if (options_.activation_checkpointing != nullptr) options_.activation_checkpointing(module);
          strategy_.prepare_deferred_model(*module, label, device_, *build, state);
          detail::forget_deferred_build(*module);
          if (options_.tune_cpu_heap && device_.is_cpu()) runtime::release_freed_cpu_memory();
          models_.push_back(module);
          return;
        }
      }
      detail::materialize_whole(*module, *build, state, device_);
    }
    module->to(device_);
    // Innermost first: a Sequential child's call goes through the strategy's unit, then the
    // activation checkpoint, then the precision's layer (Fp8's Linear).
    precision_.prepare_model(module, label);
    if (options_.activation_checkpointing != nullptr) options_.activation_checkpointing(module);
    strategy_.prepare_model(*module, label);
    if (options_.tune_cpu_heap && device_.is_cpu()) runtime::release_freed_cpu_memory();
    models_.push_back(module);
  }

  // Token-weighted windows (backward(loss_sum, tokens)), once on the last micro-step: every
  // strategy holds the gradient sums averaged over the W ranks (Ddp every parameter's, the
  // sharded strategies this rank's shard), so they are multiplied by W / the window's tokens
  // summed over the ranks: the sum over every rank and micro-step divided by that count.
  void divide_by_window_tokens() {
    if (!sync_gradients() || gradients_.loss_kind() != detail::GradientState::LossKind::token_sum ||
        gradients_.tokens_divided())
      return;
    gradients_.mark_tokens_divided();
    // Gathered, not all-reduced: the sum is checked for overflow (a wrapped one would divide the
    // gradients by a wrong count), and its error names every rank's count.
    const torch::Tensor mine = detail::one_value(gradients_.window_tokens(), torch::kLong);
    const torch::Tensor counts = group_ ? group_->allgather(mine) : mine.reshape({1});
    // A span over the tensor, not a vector copied from it: g++ 12 at -O3 reports a false
    // -Wfree-nonheap-object on that copy's destructor, which -Werror builds turn into an error.
    const std::span<const std::int64_t> count(counts.data_ptr<std::int64_t>(),
                                              static_cast<std::size_t>(counts.numel()));
    const std::int64_t tokens = detail::GradientState::sum_of_rank_tokens(count);
    if (tokens <= 0)
      detail::fail("backward(loss_sum, tokens): this accumulation window counted {} tokens on {} "
                   "rank(s) ({} here); its gradients are divided by that count, so at least one "
                   "micro-batch of the window must have a token on some rank",
                   tokens, num_processes(), gradients_.window_tokens());
    parallel::detail::scale_gradients(strategy_, prepared_parameters(),
                                      static_cast<double>(num_processes()) /
                                          static_cast<double>(tokens));
  }

  // What the checkpoint calls above hand to state::CheckpointIO (state/checkpoint_view.hpp): the
  // references a checkpoint reads and sets, and nothing else of this class's private state.
  state::CheckpointView<parallel::Strategy<parallelism_policy>> checkpoint_view() {
    return {.group = group_.get(),
            .rank = process_.rank,
            .world_size = process_.world_size,
            .options = options_,
            .policies = {parallelism_policy::name, precision_policy::name, accumulation_steps},
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
