// Run-time knobs of an Accelerator, as one aggregate meant for designated initializers:
//   accel::Accelerator<accel::Ddp> acc({.seed = 42});
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

#include "options/logging.hpp"
#include "options/profiling.hpp"

namespace accel {

/// Ddp's knobs (Options::ddp).
struct DdpOptions {
  double first_bucket_mb = 1.0;  ///< the first bucket: small, so the first all-reduce starts early
  double bucket_mb = 25.0;       ///< the others
  /// A parameter without a gradient in a backward (not used by the loss) is an error by default;
  /// with this it contributes zeros and training goes on.
  bool find_unused_parameters = false;
  /// Buffers (BatchNorm running statistics, ...) are broadcast from rank 0 before each forward.
  bool broadcast_buffers = true;
  /// After the first synchronised step each .grad becomes a view into its bucket: backward then
  /// accumulates straight into the buckets, saving one copy in and one copy out per step and the
  /// memory of a second gradient copy. PyTorch's gradient_as_bucket_view, which is off there by
  /// default; on here, since accel's zero_grad() zeroes in place and keeps the views. A .grad
  /// the user replaces (or sets to undefined) is copied in again and becomes a view once more.
  bool gradients_as_bucket_views = true;
  /// Buckets of at most this many KiB (fp32 or fp64 on CPU, uncompressed) are all-reduced right
  /// after backward on the training thread (where the buckets are, in shared memory, or else
  /// over buffers registered with Gloo once) instead of asynchronously, whose hand-offs cost
  /// more than a few KiB take to move (docs/concepts/distributed.md). Larger buckets stay asynchronous,
  /// overlapping backward. 0: every bucket asynchronous.
  double small_bucket_kb = 256.0;
  /// Where every rank is on this host and CPU tensors travel through shared memory, the buckets
  /// (fp32 or fp64, uncompressed) live in a shared-memory segment that all ranks map, and each is
  /// all-reduced where it lies: rank r sums its slice of every rank's bucket, averages it and
  /// writes it into all of them, with no copy into the transport and back and no separate
  /// averaging pass (docs/concepts/distributed.md). Costs the gradients' bytes in /dev/shm per rank of the
  /// node, as private buckets cost them in the heap. false: private buckets, copied through the
  /// transport's slots.
  bool buckets_in_shared_memory = true;
};

/// Zero2's and Fsdp<ShardGradOp>'s knobs (Options::zero2). Each bucket of trainable parameters
/// (taken in reverse registration order, as Ddp's) is its own flat parameter, sharded across the
/// ranks; its gradient is reduce-scattered as soon as backward has produced all of it, and freed,
/// so that a rank holds a bucket or two of full gradients at once instead of all of them.
struct Zero2Options {
  double first_bucket_mb = 1.0;  ///< the first bucket: small, so the first reduce-scatter starts early
  double bucket_mb = 25.0;       ///< the others
  /// Buckets whose reduce-scatter may run beside backward (on the shared-memory path's thread)
  /// while it computes the next ones; backward waits for the oldest beyond that. 0: each
  /// reduce-scatter is waited for as it starts: no overlap, and the least memory (DeepSpeed's
  /// default, overlap_comm off). Each one more overlaps more and holds one more bucket's full
  /// gradient; with no core to spare for the transport it buys no speed (docs/concepts/performance.md).
  int reduce_scatters_in_flight = 0;
};

/// Zero2's, Zero3's and Fsdp's offloading to the CPU (Options::offload), as DeepSpeed's
/// offload_optimizer and offload_param and FSDP's CPUOffload: device memory traded for copies
/// between the device and the host each step (docs/how-to/large-models.md, "CPU offload").
struct OffloadOptions {
  /// This rank's optimizer state, and its step, on the CPU: the shard optimizer steps CPU copies
  /// of this rank's parameter shard (pinned when the device is CUDA); before each step the
  /// reduce-scattered shard gradient is copied to them, after it the updated values come back to
  /// the device (Zero2 then all-gathers them as without offload). The CPU copy is the master: a
  /// parameter written directly on the device between steps is overwritten at the next step;
  /// write through load_state() or full_parameters(), which update it.
  bool optimizer = false;
  /// Zero3 and Fsdp<FullShard|HybridShard> on 2 or more processes: this rank's parameter shard
  /// and its gradient live on the CPU; a unit's all-gather copies the shard to the device, and the
  /// reduce-scattered gradient is added to the CPU shard gradient. The optimizer then steps on
  /// the CPU too (optimizer is implied). Between steps the device holds no parameters at all.
  bool parameters = false;
  /// Whether anything is offloaded.
  bool any() const { return optimizer || parameters; }
};

/// What the sharded strategies send, when narrower than the parameters (Options::
/// sharded_communication): PyTorch FSDP's MixedPrecision param_dtype / reduce_dtype for the wire
/// alone, DeepSpeed's communication_data_type. Unset: each travels in its own dtype (fp32).
/// torch::kBFloat16 or torch::kHalf; the shards, the optimizer and its state stay in the
/// parameters' dtype (the master weights), so only what crosses between ranks is rounded:
///   - parameters: Zero3 and Fsdp<FullShard|HybridShard> all-gather each unit's shards in this
///     dtype during training, so every rank computes with the rounded weights (what a Bf16
///     policy's autocast rounds them to for its matmuls anyway). full_parameters(), and so
///     checkpoints, gather the master weights whole. Zero2 keeps its full parameters between
///     steps and refuses it.
///   - gradients: Zero2, Zero3 and every Fsdp reduce-scatter gradients in this dtype, divided by
///     the ranks before the cast (the sum of the ranks' fp16 values then cannot overflow), summed
///     in it, and added to the fp32 shard gradients.
/// Training then differs from one process's by that rounding (docs/concepts/strategies.md, "Sending less:
/// a narrower communication dtype"). On one process nothing travels and nothing is rounded. Ddp
/// compresses its gradients with a policy instead: DdpWith<CompressBf16>.
struct ShardedCommunicationOptions {
  /// The all-gathered parameters' dtype.
  std::optional<torch::Dtype> parameters = std::nullopt;
  /// The reduce-scattered gradients'.
  std::optional<torch::Dtype> gradients = std::nullopt;
  /// Whether anything travels narrower.
  bool any() const { return parameters.has_value() || gradients.has_value(); }
};

/// Fp16's dynamic loss scaling (Options::loss_scaling): PyTorch's torch.amp.GradScaler, with its
/// defaults. The loss is multiplied by the scale before backward; a step whose gradients hold an
/// inf or a nan on any rank is skipped and the scale multiplied by backoff_factor; after
/// growth_interval steps in a row without one, it is multiplied by growth_factor.
struct LossScalingOptions {
  double init_scale = 65536.0;  ///< 2^16; must be positive and finite
  double growth_factor = 2.0;   ///< > 1
  double backoff_factor = 0.5;  ///< in (0, 1)
  int growth_interval = 2000;   ///< >= 1
};

/// How a delayed-scaling fp8 tensor (Fp8, TransformerEngine's recipe) turns its amax history into
/// a scale: the largest amax in the history, or the most recent one.
enum class AmaxAlgorithm { max, most_recent };

/// Fp8's delayed scaling (Options::fp8), with TransformerEngine's DelayedScaling defaults: each fp8
/// tensor keeps the amax (largest magnitude) of its last amax_history_len steps, and its scale is
/// FP8_MAX x 2^-margin / amax, updated after each step.
struct Fp8Options {
  int amax_history_len = 1024;  ///< >= 1
  int margin = 0;               ///< >= 0
  /// See AmaxAlgorithm.
  AmaxAlgorithm amax_compute_algo = AmaxAlgorithm::max;
};

/// Where save_state() and load_state() without a folder go (Options::checkpoints): automatic
/// naming, checkpoint_<n> under `directory`, n counting up from 0, as Accelerate's
/// ProjectConfiguration(automatic_checkpoint_naming=True).
struct CheckpointOptions {
  /// Where checkpoint_<n> folders go.
  std::filesystem::path directory = "checkpoints";
  /// After a save commits, only the newest total_limit checkpoints under `directory` are kept;
  /// 0 keeps all.
  int total_limit = 0;
  /// Periodic checkpoints (docs/how-to/fault-tolerance.md): save_state() into the next checkpoint_<n>
  /// every `every_steps` optimizer steps and/or every `every_seconds` (0: off), at the point
  /// between two training batches that a resumed run continues from.
  std::int64_t every_steps = 0;
  /// Seconds between periodic checkpoints, as any rank's clock sees them; 0: off.
  double every_seconds = 0;
  /// The periodic saves in the background (save_state(SaveMode::async)).
  bool async = false;
  /// At prepare(), load the newest committed checkpoint of this run under `directory` when it
  /// holds one, and start afresh when it holds none: one command line for the first start and
  /// every restart.
  bool resume = false;
  /// With resume: go on from a checkpoint saved on another number of processes or with another
  /// accumulation, although the global batch (loader batches per optimizer step) then differs
  /// from the checkpoint's. Without it such a resume is refused, naming the GradAccum that keeps
  /// the global batch (docs/how-to/fault-tolerance.md).
  bool allow_global_batch_change = false;
};

/// Run-time knobs of an Accelerator, as one aggregate meant for designated initializers:
/// `accel::Accelerator<accel::Ddp> acc({.seed = 42});`
struct Options {
  /// Where the model and batches go. Default: `cuda:<local rank>` when CUDA is available, else CPU.
  std::optional<torch::Device> device = std::nullopt;
  /// When set, the constructor calls set_seed(*seed) before anything else.
  std::optional<std::uint64_t> seed = std::nullopt;
  /// Batch copies to the device overlap compute; from CPU to CUDA only when the batch is in pinned
  /// memory (LoaderOptions::pin_memory for a prepared loader's batches).
  bool non_blocking = false;
  /// On a CPU device, glibc keeps freed memory in the process (runtime/cpu_heap.hpp) instead of
  /// returning it to the kernel and faulting it in again at the next step (faster on CPU models
  /// with activations of a few hundred KiB, same peak RSS: docs/concepts/performance.md). It may then hold
  /// up to 1 GiB of freed memory for reuse. Skipped when MALLOC_MMAP_THRESHOLD_ or
  /// MALLOC_TRIM_THRESHOLD_ is set, and off the glibc heap (a preloaded jemalloc or tcmalloc).
  bool tune_cpu_heap = true;
  /// With tune_cpu_heap: blocks below this many bytes come from glibc's heap and stay in the
  /// process when freed (no page faults at the next step); larger ones are mapped and given back
  /// when freed. Unset: 32 MiB, and 8 MiB under the policies that shard parameters (Zero3,
  /// Fsdp<FullShard|HybridShard>), chosen for memory: autograd's gradient of a weight above it
  /// then goes back to the kernel each step instead of staying in a heap that the optimizer state
  /// fragments, which lowers their peak RSS, at a cost in steps/s where weights are that large
  /// (their gathered units and full gradients come from accel's own cache at any threshold;
  /// docs/how-to/large-models.md, "Zero3's peak on CPU"). 4096 to 33554432 (glibc's largest).
  std::optional<std::size_t> cpu_heap_mmap_threshold = std::nullopt;

  /// How long a collective may wait for the other ranks before failing, instead of hanging
  /// (PyTorch's default, 30 minutes); the error names the collective. `ACCEL_TIMEOUT=<seconds>`
  /// replaces it. Must be positive.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  /// How long the ranks may take to meet at the start (the store, then Gloo's connections) before
  /// failing; `ACCEL_RENDEZVOUS_TIMEOUT=<seconds>` replaces it. A MASTER_ADDR that does not resolve
  /// fails at once.
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(5);
  /// Before each collective the ranks compare what they are about to call and fail, naming
  /// both calls, on a mismatch. Costs one small all-gather per collective; for tests and
  /// debugging. ACCEL_CHECK_COLLECTIVES=1 turns it on too.
  bool check_collectives = false;
  /// CPU tensors travel through a shared-memory segment when every rank is on this host
  /// (docs/concepts/distributed.md, "Shared memory"): several times Gloo's loopback bandwidth. false (or
  /// ACCEL_SHARED_MEMORY=0) sends everything through Gloo, as across nodes.
  bool shared_memory = true;
  /// Zero3 and Fsdp<FullShard|HybridShard>: as a Sequential's child unit runs, the next one's
  /// all-gather runs beside it (in backward the previous one's), on the shared-memory path's
  /// thread; across nodes it stays where it is needed. At most two child units gathered at once.
  /// Off by default: the gather then needs a core of its own, and on a machine with a core per
  /// rank it costs steps/s and a unit's memory (docs/concepts/performance.md).
  bool prefetch_units = false;

  /// optimizer.step() of a prepared torch::optim::SGD, Adam or AdamW runs accel's fused step
  /// (parallel/fused_step.hpp): one pass over each parameter, its gradient and its state instead
  /// of libtorch's several kernels, with libtorch's own arithmetic (bitwise its result where
  /// measured, at most 1 ulp per step by contract) and its own state objects, so checkpoints and
  /// optimizer.state() are unchanged. Where it does not apply (amsgrad, CUDA, a parameter that is
  /// not a contiguous fp32 CPU tensor, another optimizer type) libtorch's step() runs, as with
  /// false here.
  bool fused_optimizer = true;

  /// Prepared loaders: every rank gets the same number of batches per epoch, the last round
  /// completed by wrapping around to the epoch's first batches (gather_for_metrics drops the
  /// duplicates). Off: ranks may get one batch fewer.
  bool even_batches = true;
  /// Prepared loaders: each batch of batch_size is split across the ranks instead of each rank
  /// taking whole batches (the global batch is then batch_size, not batch_size x world size).
  bool split_batches = false;

  /// prepare() applies this to every model before the strategy lays it out. Set it to
  /// accel::memory::checkpoint_sequential_children to checkpoint every child with parameters of
  /// the model's Sequentials (as FSDP's apply_activation_checkpointing): their activations are
  /// recomputed in backward instead of kept (memory/activation_checkpoint_children.hpp, docs/how-to/large-models.md).
  /// A function rather than a flag: the checkpointing code (libtorch's autograd::Function, on
  /// which g++ 14 warns falsely) is then compiled only into programs that name it.
  std::size_t (*activation_checkpointing)(const std::shared_ptr<torch::nn::Module>&) = nullptr;

  /// Ddp's knobs.
  DdpOptions ddp = {};
  /// Zero2's and Fsdp<ShardGradOp>'s knobs.
  Zero2Options zero2 = {};
  /// Offloading to the CPU.
  OffloadOptions offload = {};
  /// A narrower communication dtype.
  ShardedCommunicationOptions sharded_communication = {};
  /// Fp16's dynamic loss scaling.
  LossScalingOptions loss_scaling = {};
  /// Fp8's delayed scaling.
  Fp8Options fp8 = {};
  /// Where save_state() without a folder goes.
  CheckpointOptions checkpoints = {};
  /// accelerator.logger()'s level and rank prefix (options/logging.hpp).
  logging::LoggerOptions logging = {};
  /// The per-step timeline (docs/how-to/profiling.md): {.enabled = true} logs each optimizer step's
  /// seconds in data, forward, backward, communication, optimizer and idle, per rank, through
  /// the trackers of the open run, with samples/s, tokens/s and MFU where their inputs are given.
  profiling::TimelineOptions timeline = {};
};

/// @{
/// accelerator.profile()'s options and schedule (options/profiling.hpp), under shorter names.
using ProfileOptions = profiling::ProfileOptions;
using ProfileSchedule = profiling::ProfileSchedule;
using TimelineOptions = profiling::TimelineOptions;
/// @}

}  // namespace accel
