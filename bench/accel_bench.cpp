// accel_bench: training throughput of an Accelerator on synthetic data, for comparing accel's
// Ddp with PyTorch's DistributedDataParallel (bench/reference/ddp.py takes the same flags and
// builds the same models, parameter for parameter). bench/run.sh runs both in turns.
//
//   accel_bench [--nproc N] [--strategy ddp] [--precision fp32|bf16|fp16|fp8] [--accum 1|2|4]
//               [--model mlp|xfmr|tiny|gpt] [--hidden H] [--layers L] [--batch B] [--seq S]
//               [--heads A] [--steps N] [--warmup N] [--threads T] [--bucket-mb MB] [--pin]
//               [--compress none|fp16|bf16] [--no-bucket-views] [--private-buckets] [--plain]
//               [--breakdown]
//
// Every rank trains --warmup optimizer steps, then times --steps. The last line, from rank 0:
//   steps_per_s=<x> samples_per_s=<y> [tokens_per_s=<t>] peak_rss_mb=<z> ...
// samples are global: batch x world size x accum per optimizer step; peak RSS is rank 0's VmHWM
// (rank_peak_rss_mb= lists every rank's). --model gpt trains the gpt example's model
// (examples/gpt/model.hpp) with its AdamW and schedule; ddp.py --model gpt is its PyTorch side
// (the model in bench/reference/gpt_model.py), under DDP and FSDP.
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>
#include <accel/memory.hpp>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "blas_threads.hpp"
#include "gpt/model.hpp"

#if ACCEL_BENCH_CUDA  // bench/CMakeLists.txt: a CUDA libtorch
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace {

// Whether this build compiled --accum 2|4 in (bench/CMakeLists.txt; parse() refuses them
// otherwise).
#if defined(ACCEL_ALL_VARIANTS)
constexpr bool kAllVariants = true;
#else
constexpr bool kAllVariants = false;
#endif

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// --- Command line ------------------------------------------------------------------------------

struct Config {
  std::string strategy = "ddp";
  std::string optimizer;  // empty: the model's default (sgd; adamw for gpt)
  std::string precision = "fp32";
  int accum = 1;
  std::string model = "mlp";
  std::int64_t hidden = 0, layers = 0, batch = 0, seq = 0, heads = 0;  // 0: the model's default
  int steps = 0, warmup = -1;                                         // likewise
  int threads = 1;
  double bucket_mb = 25.0;
  int in_flight = accel::Zero2Options{}.reduce_scatters_in_flight;
  double small_bucket_kb = accel::DdpOptions{}.small_bucket_kb;
  std::string compress = "none";
  bool bucket_views = accel::DdpOptions{}.gradients_as_bucket_views;
  bool shared_buckets = accel::DdpOptions{}.buckets_in_shared_memory;
  bool tune_heap = accel::Options{}.tune_cpu_heap;
  double heap_mmap_mb = 0;  // 0: the Accelerator's default
  bool prefetch = accel::Options{}.prefetch_units;
  bool fused_optimizer = accel::Options{}.fused_optimizer;
  std::string offload = "none";
  std::string comm_params = "none", comm_grads = "none";  // Options::sharded_communication
  bool breakdown = false;
  bool timeline = false;  // Options::timeline on, logged to a run under $TMPDIR
  bool pin = false;
  bool plain = false;
  std::string checkpoint;  // a folder: time save_state / load_state after training
  bool save_model = false;  // with it: then save_model into DIR/model, timed
  bool activation_checkpointing = false;  // xfmr: each block through accel::checkpoint
  std::int64_t checkpoint_blocks = -1;    // with it: only the first N blocks (-1: all)
  std::string checkpoint_part = "block";  // or "attention": only each block's attention half
  bool alternate_checkpointing = false;   // timed steps alternate without / with it
};

constexpr const char* kUsage = R"(usage: accel_bench [--nproc N] [options]

Trains a synthetic model with accel::Accelerator<Strategy, Precision, GradAccum<N>> and SGD (the
gpt model: AdamW), and prints, from rank 0, as its last line:
  steps_per_s=<x> samples_per_s=<y> [tokens_per_s=<t>] peak_rss_mb=<z> ... rank_peak_rss_mb=<a,b>
(optimizer steps; samples = batch x world size x accum per step, tokens = samples x seq for
gpt; rank 0's peak RSS, VmHWM, then every rank's). bench/reference/ddp.py takes the same flags
and trains the same models with PyTorch's DDP (and FSDP: --strategy fsdp-full and the like).

  --nproc N              worker processes, through accel::launch() (default 1, or ACCEL_NPROC)
  --checkpoint DIR       after training, time save_state and load_state into DIR/state and
                         print checkpoint: save_s=<x> load_s=<y> bytes=<z>
  --save-model           with --checkpoint: after load_state, time save_model into DIR/model
                         (what merging a checkpoint with the training program costs; against
                         `accel-launch checkpoint merge`: bench/checkpoint.sh --merge) and add
                         save_model_s=<m> to that line
  --strategy S           ddp (default) | zero2 | zero3 | fsdp (Fsdp<FullShard>, which is zero3)
  --optimizer O          sgd (default, lr 0.01) | adam (lr 0.001): Adam's 8 bytes of state per
                         parameter are what the sharded strategies split | adamw (gpt's and
                         only gpt's: the example's two param groups, weight decay 0.1 on the
                         Linear weights, betas 0.9/0.95, lr 6e-3 after a linear warmup over
                         --warmup steps, then a cosine to lr/10 at the last timed step)
  --precision P          fp32 (default) | bf16 (autocast forward, fp32 master weights) |
                         fp16 (the same, with dynamic loss scaling; on CPU from libtorch 2.x) |
                         fp8 (Linear layers in e4m3/e5m2, emulated; the rest bf16; --accum 1)
  --accum N              1 (default) | 2 | 4: micro-batches per optimizer step (GradAccum<N>);
                         2 and 4 in a build configured with -DACCEL_ALL_VARIANTS=ON
  --model M              mlp (default): 784 -> hidden x layers -> 10, ReLU (1024, 4, batch 64)
                         tiny: 32 -> hidden x layers -> 10, ReLU (32, 1, batch 8): per-step
                               overhead dominates
                         xfmr: transformer encoder (post-norm blocks of multi-head attention
                               from Linear + softmax, and a ReLU feed-forward of 4 x hidden),
                               mean-pooled into a classification head
                               (hidden 128, layers 2, heads 4, seq 32, batch 16)
                         gpt: the gpt example's decoder (examples/gpt/model.hpp: byte
                               vocabulary, pre-norm blocks of causal attention from Linear +
                               matmul + softmax, 4x GELU MLP, tied head), next-byte loss on
                               random bytes (hidden 128, layers 4, heads 4, seq 64, batch 8);
                               also prints tokens_per_s
  --hidden H, --layers L, --batch B (per rank), --seq S (xfmr, gpt), --heads A (xfmr, gpt)
  --steps N              timed optimizer steps (default: mlp 60, xfmr 60, tiny 3000, gpt 20)
  --warmup N             untimed optimizer steps first (default: steps / 10, at least 3)
  --threads T            threads per rank (default 1): torch::set_num_threads, and OpenBLAS's
                         own thread count, which torch::set_num_threads leaves alone
  --pin                  pin rank r to core r (mod the core count), before any thread starts
  --plain                no Accelerator: the same model, data and SGD in a plain libtorch loop
                         (zero_grad, forward, backward, step), one process, fp32 only; the
                         reference for the Accelerator's own cost at world size 1
  --bucket-mb MB         Ddp's and Zero2's bucket size after the first 1 MiB bucket (default 25,
                         as PyTorch)
  --in-flight N          zero2, fsdp-grad-op: Options::zero2.reduce_scatters_in_flight (default 0:
                         each bucket's reduce-scatter waited for as it starts)
  --small-bucket-kb KB   Ddp buckets up to this size are all-reduced after backward on the
                         training thread (in shared memory, or over Gloo's registered buffers),
                         not asynchronously (default 256; 0: every bucket asynchronous)
  --private-buckets      Options::ddp.buckets_in_shared_memory = false: Ddp's buckets in each
                         rank's own memory, copied through the shared-memory transport, instead
                         of all-reduced where they lie in shared memory (--shared-buckets, the
                         default)
  --compress C           none (default) | fp16 | bf16: Ddp's gradients all-reduced in fp16/bf16
                         (DdpWith<CompressFp16|CompressBf16>; bf16 needs libtorch >= 2.x's Gloo)
  --no-bucket-views      Options::ddp.gradients_as_bucket_views = false: gradients copied into
                         the buckets and back (PyTorch's default) instead of living in them
                         (accel's default; --bucket-views says so explicitly)
  --no-heap-tuning       Options::tune_cpu_heap = false: glibc's default heap thresholds (the
                         plain loop of --plain always has them)
  --heap-mmap-mb X       Options::cpu_heap_mmap_threshold = X MiB: blocks from X MiB up are mapped
                         and given back when freed (default: 8 under zero3/fsdp, else 32)
  --prefetch             zero3, fsdp: Options::prefetch_units = true (the next unit gathered
                         beside this one's compute, not when it is needed)
  --no-fused-optimizer   Options::fused_optimizer = false: libtorch's own optimizer step
                         instead of accel's fused one (--fused-optimizer says so explicitly)
  --offload O            none (default) | optimizer | parameters: Options::offload (zero2, zero3,
                         fsdp*): optimizer state and its step on CPU copies; parameters (zero3,
                         fsdp): the parameter shards too
  --comm-params D        none (default) | bf16 | fp16: zero3, fsdp-full: each unit all-gathered in
                         D (Options::sharded_communication.parameters)
  --comm-grads D         none (default) | bf16 | fp16: zero2, zero3, fsdp*: gradients
                         reduce-scattered in D (Options::sharded_communication.gradients)
  --activation-checkpointing  xfmr: every block runs through accel::checkpoint (activations
                         recomputed in backward; docs/how-to/large-models.md)
  --checkpoint-blocks N  with --activation-checkpointing: only the first N blocks (the last
                         ones keep their activations: less recompute, less memory saved)
  --checkpoint-part P    with --activation-checkpointing: block (default: the whole block) |
                         attention (only its attention half, qkv to norm1: what Megatron-LM
                         calls selective recomputation; the feed-forward keeps its activations)
  --alternate-checkpointing  with --activation-checkpointing: warm-up and timed steps
                         alternate between without and with it in this one process (same data,
                         same model), and rank 0 prints, before the last line,
                           checkpointing: step_ms_without=<a> step_ms_with=<b> ratio=<b/a>
                         (medians of each kind's timed steps): a ratio that the machine's
                         speed swings between runs do not reach. Peak RSS is then the unchecked
                         steps'; measure it in a run of its own
  --breakdown            also time each part of a step (forward, backward with the gradient
                         hooks, waiting in finalize, optimizer step, zero_grad) from outside
                         the Accelerator, and print it on rank 0 before the last line; finalize
                         split into the rank's CPU time (all its threads), its threads' wait for
                         a core taken by other processes, and idle: waiting for the other ranks
  --timeline             the per-step timeline on (Options::timeline, docs/how-to/profiling.md),
                         logged every step to a run under $TMPDIR/accel-bench-runs (JSONL and
                         CSV): what it costs a step
  -h, --help             this text
)";

[[noreturn]] void usage_error(const std::string& message) {
  fmt::print(stderr, "accel_bench: {}\n{}", message, kUsage);
  std::exit(2);
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    const auto eq = flag.find('=');
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (flag == "--save-model") {
      c.save_model = true;
      continue;
    }
    if (flag == "--activation-checkpointing" || flag == "--alternate-checkpointing") {
      (flag == "--activation-checkpointing" ? c.activation_checkpointing
                                            : c.alternate_checkpointing) = true;
      continue;
    }
    if (flag == "--no-heap-tuning") {
      c.tune_heap = false;
      continue;
    }
    if (flag == "--prefetch") {
      c.prefetch = true;
      continue;
    }
    if (flag == "--fused-optimizer" || flag == "--no-fused-optimizer") {
      c.fused_optimizer = flag == "--fused-optimizer";
      continue;
    }
    if (flag == "--bucket-views" || flag == "--no-bucket-views") {
      c.bucket_views = flag == "--bucket-views";
      continue;
    }
    if (flag == "--shared-buckets" || flag == "--private-buckets") {
      c.shared_buckets = flag == "--shared-buckets";
      continue;
    }
    if (flag == "--timeline") {
      c.timeline = true;
      continue;
    }
    if (flag == "--breakdown" || flag == "--pin" || flag == "--plain") {
      (flag == "--pin" ? c.pin : flag == "--plain" ? c.plain : c.breakdown) = true;
      continue;
    }
    if (eq == std::string::npos) {
      if (i + 1 >= argc) usage_error(fmt::format("{} needs a value", flag));
      value = argv[++i];
    }
    try {
      std::size_t used = 0;
      auto integer = [&] {
        const long long v = std::stoll(value, &used);
        if (used != value.size() || v < 0) throw std::invalid_argument(value);
        return v;
      };
      if (flag == "--strategy") c.strategy = value;
      else if (flag == "--optimizer") c.optimizer = value;
      else if (flag == "--offload") c.offload = value;
      else if (flag == "--precision") c.precision = value;
      else if (flag == "--model") c.model = value;
      else if (flag == "--accum") c.accum = static_cast<int>(integer());
      else if (flag == "--hidden") c.hidden = integer();
      else if (flag == "--layers") c.layers = integer();
      else if (flag == "--batch") c.batch = integer();
      else if (flag == "--seq") c.seq = integer();
      else if (flag == "--heads") c.heads = integer();
      else if (flag == "--steps") c.steps = static_cast<int>(integer());
      else if (flag == "--warmup") c.warmup = static_cast<int>(integer());
      else if (flag == "--threads") c.threads = static_cast<int>(integer());
      else if (flag == "--bucket-mb") c.bucket_mb = std::stod(value);
      else if (flag == "--heap-mmap-mb") c.heap_mmap_mb = std::stod(value);
      else if (flag == "--in-flight") c.in_flight = static_cast<int>(integer());
      else if (flag == "--small-bucket-kb") c.small_bucket_kb = std::stod(value);
      else if (flag == "--compress") c.compress = value;
      else if (flag == "--comm-params") c.comm_params = value;
      else if (flag == "--comm-grads") c.comm_grads = value;
      else if (flag == "--checkpoint") c.checkpoint = value;
      else if (flag == "--checkpoint-blocks") c.checkpoint_blocks = integer();
      else if (flag == "--checkpoint-part") c.checkpoint_part = value;
      else usage_error(fmt::format("unknown option '{}'", flag));
    } catch (const std::logic_error&) {
      usage_error(fmt::format("{} '{}' is not a valid number", flag, value));
    }
  }
  if (c.model == "mlp") {
    if (!c.hidden) c.hidden = 1024;
    if (!c.layers) c.layers = 4;
    if (!c.batch) c.batch = 64;
    if (!c.steps) c.steps = 60;
  } else if (c.model == "tiny") {
    if (!c.hidden) c.hidden = 32;
    if (!c.layers) c.layers = 1;
    if (!c.batch) c.batch = 8;
    if (!c.steps) c.steps = 3000;
  } else if (c.model == "xfmr") {
    if (!c.hidden) c.hidden = 128;
    if (!c.layers) c.layers = 2;
    if (!c.batch) c.batch = 16;
    if (!c.seq) c.seq = 32;
    if (!c.heads) c.heads = 4;
    if (!c.steps) c.steps = 60;
    if (c.hidden % c.heads != 0)
      usage_error(fmt::format("--hidden {} is not a multiple of --heads {}", c.hidden, c.heads));
  } else if (c.model == "gpt") {  // the gpt example's model at the example's size
    if (!c.hidden) c.hidden = 128;
    if (!c.layers) c.layers = 4;
    if (!c.heads) c.heads = 4;
    if (!c.seq) c.seq = 64;
    if (!c.batch) c.batch = 8;
    if (!c.steps) c.steps = 20;
    if (c.hidden % c.heads != 0)
      usage_error(fmt::format("--hidden {} is not a multiple of --heads {}; each head takes "
                              "hidden / heads of the width",
                              c.hidden, c.heads));
  } else {
    usage_error(fmt::format("--model '{}': use mlp, tiny, xfmr or gpt", c.model));
  }
  // AdamW is the gpt example's optimizer, with its param groups and schedule; the other models
  // keep the optimizers their published numbers were measured with.
  if (c.optimizer.empty()) c.optimizer = c.model == "gpt" ? "adamw" : "sgd";
  if (c.model == "gpt" && c.optimizer != "adamw")
    usage_error(fmt::format("--optimizer '{}' with --model gpt: gpt trains with the example's "
                            "AdamW; drop --optimizer or use --optimizer adamw",
                            c.optimizer));
  if (c.model != "gpt" && c.optimizer != "sgd" && c.optimizer != "adam")
    usage_error(fmt::format("--optimizer '{}' with --model {}: use sgd or adam (adamw goes with "
                            "--model gpt)",
                            c.optimizer, c.model));
  if (c.warmup < 0) c.warmup = std::max(3, c.steps / 10);
  if (c.accum != 1 && c.accum != 2 && c.accum != 4)
    usage_error(fmt::format("--accum {}: use 1, 2 or 4", c.accum));
  if (c.accum != 1 && !kAllVariants)
    usage_error(fmt::format("--accum {}: this build compiled --accum 1 only; configure with "
                            "-DACCEL_ALL_VARIANTS=ON for 2 and 4",
                            c.accum));
  if (c.precision != "fp32" && c.precision != "bf16" && c.precision != "fp16" &&
      c.precision != "fp8")
    usage_error(fmt::format("--precision '{}': use fp32, bf16, fp16 or fp8", c.precision));
  // Each variant is compiled in, and this binary compiles in CI: accumulation is benchmarked
  // with the plain strategies and precisions (fp8, compression and fsdp, which is zero3's code,
  // accumulate in the tests and the example).
  if (c.accum != 1 && (c.precision == "fp8" || c.compress != "none" || c.strategy == "fsdp"))
    usage_error(fmt::format("--accum {} with {}: this benchmark runs fp8, --compress and fsdp "
                            "with --accum 1",
                            c.accum, c.precision == "fp8" ? "--precision fp8"
                                     : c.compress != "none" ? "--compress " + c.compress
                                                            : std::string("--strategy fsdp")));
  if (c.steps < 1 || c.threads < 1 || c.batch < 1 || c.hidden < 1 || c.layers < 1)
    usage_error("--steps, --threads, --batch, --hidden and --layers must be at least 1");
  if (!(c.bucket_mb > 0.0)) usage_error("--bucket-mb must be > 0");
  if (c.in_flight < 0) usage_error("--in-flight must be 0 or more");
  if (!(c.small_bucket_kb >= 0.0)) usage_error("--small-bucket-kb must be >= 0");
  if (c.compress != "none" && c.compress != "fp16" && c.compress != "bf16")
    usage_error(fmt::format("--compress '{}': use none, fp16 or bf16", c.compress));
  if (c.compress != "none" && c.strategy != "ddp")
    usage_error("--compress goes with --strategy ddp only");
  if ((c.checkpoint_blocks >= 0 || c.alternate_checkpointing) && !c.activation_checkpointing)
    usage_error(fmt::format("{} goes with --activation-checkpointing",
                            c.alternate_checkpointing ? "--alternate-checkpointing"
                                                      : "--checkpoint-blocks"));
  if (c.offload != "none" && c.offload != "optimizer" && c.offload != "parameters")
    usage_error(fmt::format("--offload '{}': use none, optimizer or parameters", c.offload));
  if (c.checkpoint_part != "block" && c.checkpoint_part != "attention")
    usage_error(fmt::format("--checkpoint-part '{}': use block or attention", c.checkpoint_part));
  // The attention half alone is called around the block's unit (block->attention), which under
  // Zero3 and Fsdp finds the block's parameters at rest.
  if (c.checkpoint_part == "attention" && (c.strategy == "zero3" || c.strategy == "fsdp"))
    usage_error("--checkpoint-part attention checkpoints half a block, outside its Zero3/Fsdp unit; "
                "use --checkpoint-part block with --strategy " + c.strategy);
  if (c.save_model && c.checkpoint.empty()) usage_error("--save-model goes with --checkpoint DIR");
  if (c.alternate_checkpointing && c.steps < 2)
    usage_error("--alternate-checkpointing needs --steps 2 or more (one of each kind)");
  if (c.activation_checkpointing && c.model != "xfmr")
    usage_error(fmt::format("--activation-checkpointing checkpoints xfmr's blocks; --model {} "
                            "has none (use --model xfmr)", c.model));
  return c;
}

// --- Models: the same modules, in the same registration order, as bench/reference/ddp.py ---------

struct BlockImpl : torch::nn::Module {
  BlockImpl(std::int64_t hidden, std::int64_t heads)
      : heads(heads),
        qkv(register_module("qkv", accel::Fp8Linear(hidden, 3 * hidden))),
        proj(register_module("proj", accel::Fp8Linear(hidden, hidden))),
        norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        ff1(register_module("ff1", accel::Fp8Linear(hidden, 4 * hidden))),
        ff2(register_module("ff2", accel::Fp8Linear(4 * hidden, hidden))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))) {}

  torch::Tensor forward(torch::Tensor x) { return feed_forward(attention(x)); }

  // The two halves, each with its residual and norm (--checkpoint-part attention takes the first).
  torch::Tensor attention(const torch::Tensor& x) {
    const std::int64_t b = x.size(0), s = x.size(1), h = x.size(2), d = h / heads;
    const torch::Tensor parts = qkv(x).view({b, s, 3, heads, d}).permute({2, 0, 3, 1, 4});
    const torch::Tensor q = parts[0], k = parts[1], v = parts[2];  // [b, heads, s, d]
    const torch::Tensor weights =
        torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(d))), -1);
    const torch::Tensor mixed = torch::matmul(weights, v).transpose(1, 2).reshape({b, s, h});
    return norm1(x + proj(mixed));
  }

  torch::Tensor feed_forward(const torch::Tensor& x) { return norm2(x + ff2(torch::relu(ff1(x)))); }

  std::int64_t heads;
  // accel::Fp8Linear is torch::nn::Linear but under Fp8, where it computes in fp8 (called by
  // this forward itself, a plain Linear would stay in bf16).
  accel::Fp8Linear qkv, proj;
  torch::nn::LayerNorm norm1;
  accel::Fp8Linear ff1, ff2;
  torch::nn::LayerNorm norm2;
};
TORCH_MODULE(Block);

struct BenchNetImpl : torch::nn::Module {
  explicit BenchNetImpl(const Config& c)
      : checkpointed_blocks(!c.activation_checkpointing  ? 0
                            : c.checkpoint_blocks < 0 ? c.layers
                                                      : c.checkpoint_blocks),
        attention_only(c.checkpoint_part == "attention") {
    if (c.model == "gpt") {
      // The example's model itself, whole, as this module's one child: its blocks are
      // accel::Sharded units under Zero3 and Fsdp, as in the example.
      gpt = register_module("gpt", gpt::Gpt(gpt::ModelOptions{
                                       .layers = c.layers, .hidden = c.hidden,
                                       .heads = c.heads, .context = c.seq, .tied_head = true}));
    } else if (c.model == "xfmr") {
      for (std::int64_t i = 0; i < c.layers; ++i)
        blocks.push_back(
            register_module(fmt::format("block{}", i), accel::Sharded<Block>(c.hidden, c.heads)));
      head = register_module("head", torch::nn::Linear(c.hidden, 10));
    } else {
      std::int64_t width = c.model == "mlp" ? 784 : 32;
      net = register_module("net", torch::nn::Sequential());
      for (std::int64_t i = 0; i < c.layers; ++i) {
        net->push_back(torch::nn::Linear(width, c.hidden));
        net->push_back(torch::nn::ReLU());
        width = c.hidden;
      }
      net->push_back(torch::nn::Linear(width, 10));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    if (gpt) return gpt->forward(x);  // tokens [batch, seq] -> logits [batch, seq, 256]
    if (!blocks.empty()) {
      std::int64_t index = 0;
      for (auto& block : blocks) {
        if (index++ >= checkpointed_blocks)
          x = block(x);
        else if (attention_only)
          x = block->feed_forward(accel::checkpoint(
              [&block](const torch::Tensor& t) { return block->attention(t); }, x));
        else
          x = accel::checkpoint([&block](const torch::Tensor& t) { return block(t); }, x);
      }
      return head(x.mean(1));
    }
    return net->forward(x);
  }

  std::int64_t checkpointed_blocks;  // the first ones run through accel::checkpoint (the
                                     // training loop sets it with --alternate-checkpointing)
  bool attention_only;               // of those, only the attention half
  torch::nn::Sequential net{nullptr};
  // Each block a unit of its own under Zero3 and Fsdp (without the mark they would all join the
  // root unit, gathered whole for the whole step); under the other strategies it changes nothing.
  std::vector<accel::Sharded<Block>> blocks;
  torch::nn::Linear head{nullptr};
  gpt::Gpt gpt{nullptr};  // --model gpt
};
TORCH_MODULE(BenchNet);

// gpt's schedule (the example's): linear warmup over the untimed steps, then half a cosine down
// to lr / 10 at the last timed step, so the timed steps run the decaying part a real run spends
// most of its time in.
using GptSchedule = accel::schedule::CosineWithWarmup;

// The optimizer --optimizer names, over `net`'s parameters, then `use(optimizer, schedule)`,
// the schedule null but for gpt. Each optimizer keeps its own type: the sharded strategies
// build the same type over each rank's shard.
template <class Use>
int with_optimizer(const Config& c, BenchNetImpl& net, Use&& use) {
  if (c.optimizer == "adamw") {
    // The gpt example's AdamW (examples/gpt/main.cpp): weight decay on the Linear layers'
    // matrices only, each group in registration order.
    const gpt::ParamGroups groups = gpt::weight_decay_groups(*net.gpt);
    auto options = [](double weight_decay) {
      return torch::optim::AdamWOptions(6e-3).betas({0.9, 0.95}).weight_decay(weight_decay);
    };
    std::vector<torch::optim::OptimizerParamGroup> param_groups;
    param_groups.emplace_back(groups.decayed,
                              std::make_unique<torch::optim::AdamWOptions>(options(0.1)));
    param_groups.emplace_back(groups.not_decayed,
                              std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
    torch::optim::AdamW adamw(std::move(param_groups), options(0.0));
    GptSchedule schedule(adamw, {.warmup_steps = c.warmup,
                                 .total_steps = c.warmup + c.steps,
                                 .min_ratio = 0.1});
    return use(adamw, &schedule);
  }
  if (c.optimizer == "adam") {
    torch::optim::Adam adam(net.parameters(), torch::optim::AdamOptions(0.001));
    return use(adam, static_cast<GptSchedule*>(nullptr));
  }
  torch::optim::SGD sgd(net.parameters(), torch::optim::SGDOptions(0.01));
  return use(sgd, static_cast<GptSchedule*>(nullptr));
}

// One batch: the model's input and the labels its loss compares the output with.
struct Batch {
  torch::Tensor input, labels;
};

// Synthetic data from torch's generator (seeded by the caller). gpt: windows of seq + 1 random
// bytes, the input the first seq and the labels the next byte at each position (flattened, as
// the example's loss takes them); the others: random inputs and one of 10 classes.
Batch make_batch(const Config& c) {
  if (c.model == "gpt") {
    const torch::Tensor window =
        torch::randint(gpt::kVocabulary, {c.batch, c.seq + 1}, torch::kLong);
    return {window.narrow(1, 0, c.seq).contiguous(), window.narrow(1, 1, c.seq).reshape({-1})};
  }
  torch::Tensor input = c.model == "xfmr" ? torch::randn({c.batch, c.seq, c.hidden})
                                          : torch::randn({c.batch, c.model == "mlp" ? 784 : 32});
  return {std::move(input), torch::randint(10, {c.batch})};
}

// The loss of one forward: cross entropy over the classes, or for gpt over the next byte at
// every position (logits [batch, seq, 256] flattened as the labels are).
torch::Tensor loss_of(const Config& c, const torch::Tensor& output, const torch::Tensor& labels) {
  return torch::nn::functional::cross_entropy(
      c.model == "gpt" ? output.reshape({-1, gpt::kVocabulary}) : output, labels);
}

// Minor page faults and CPU seconds (every thread) of this process so far.
struct Usage {
  double faults = 0, cpu = 0;
  static Usage now() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    const auto tv = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
    return {double(u.ru_minflt), tv(u.ru_utime) + tv(u.ru_stime)};
  }
};

double peak_rss_mb() {
  const auto peak = accel::memory::peak_resident_bytes();
  return peak ? static_cast<double>(*peak) / (1 << 20) : -1.0;
}

// --- Breakdown: timestamps taken around the Accelerator's calls, plus one post-accumulation hook
// per parameter, registered after prepare() so that it runs after the library's own hook (post
// hooks run in registration order): the latest of them marks the end of autograd's work, copies
// into the buckets included. What acc.backward() spends after that is finalize: waiting for the
// all-reduces, averaging and writing the gradients back. ------------------------------------------

// This process's CPU time (all threads; exact, where schedstat's run time of a running thread
// lags by up to a scheduler tick) and the run-queue wait of every thread (from
// /proc/self/task/<tid>/schedstat), in seconds. Over finalize, wall time minus both is time in
// which no thread of this rank wanted its core: it waited for the other ranks. Run-queue wait
// is the core taken by other processes (a loaded machine).
struct ThreadTimes {
  std::vector<int> files;
  void open_all() {  // after the warm-up steps, when every thread of the rank exists
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      const int fd = ::open((task.path() / "schedstat").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) files.push_back(fd);
    }
  }
  std::pair<double, double> read() const {
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    double waiting = 0;
    for (int fd : files) {
      char text[128] = {};
      if (::pread(fd, text, sizeof text - 1, 0) <= 0) continue;
      unsigned long long run = 0, queued = 0;
      if (std::sscanf(text, "%llu %llu", &run, &queued) == 2)
        waiting += 1e-9 * static_cast<double>(queued);
    }
    return {static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec), waiting};
  }
  ~ThreadTimes() {
    for (int fd : files) ::close(fd);
  }
};

struct Breakdown {
  double forward = 0, backward = 0, finalize = 0, step = 0, zero_grad = 0;
  double finalize_cpu = 0, finalize_queued = 0;
  Clock::time_point last_hook{};
  std::pair<double, double> last_hook_times{};
  ThreadTimes threads;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;

  void install(const std::vector<torch::Tensor>& parameters) {
    for (const auto& p : parameters) {
      if (!p.requires_grad()) continue;
      auto accumulator = torch::autograd::impl::grad_accumulator(p);
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this](const torch::autograd::variable_list& outputs,
                 const torch::autograd::variable_list& /*inputs*/) {
            last_hook = Clock::now();
            if (!threads.files.empty()) last_hook_times = threads.read();
            return outputs;
          }));
      accumulators.push_back(std::move(accumulator));
    }
  }
};

// Rank r on core r mod the core count: unpinned, a one-thread process here sometimes runs at
// 60% of its speed (it migrates between the two cores).
void pin_to_core() {
  const char* local_rank = std::getenv("LOCAL_RANK");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET((local_rank ? std::atoi(local_rank) : 0) % static_cast<int>(cores), &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("accel_bench: sched_setaffinity");
}

// --comm-params / --comm-grads: none, bf16 or fp16.
std::optional<torch::Dtype> communication_dtype(const std::string& name) {
  if (name == "none") return std::nullopt;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  usage_error(fmt::format("a communication dtype is none, bf16 or fp16, not '{}'", name));
}

template <class Acc>
int train(const Config& c) {
  if (c.pin) pin_to_core();
  torch::set_num_threads(c.threads);
  limit_blas_threads(c.threads);
  Acc acc(accel::Options{
      .tune_cpu_heap = c.tune_heap,
      .cpu_heap_mmap_threshold = c.heap_mmap_mb > 0 ? std::optional<std::size_t>(
                                                          c.heap_mmap_mb * double(1 << 20))
                                                    : std::nullopt,
      .prefetch_units = c.prefetch,
      .fused_optimizer = c.fused_optimizer,
      .ddp = {.bucket_mb = c.bucket_mb,
              .gradients_as_bucket_views = c.bucket_views,
              .small_bucket_kb = c.small_bucket_kb,
              .buckets_in_shared_memory = c.shared_buckets},
      .zero2 = {.bucket_mb = c.bucket_mb, .reduce_scatters_in_flight = c.in_flight},
      .offload = {.optimizer = c.offload == "optimizer", .parameters = c.offload == "parameters"},
      .sharded_communication = {.parameters = communication_dtype(c.comm_params),
                                .gradients = communication_dtype(c.comm_grads)}});
  const int rank = acc.process_index(), world = acc.num_processes();

  torch::manual_seed(0);  // same initial model everywhere (Ddp broadcasts rank 0's anyway)
  BenchNet net(c);
  // Counted before prepare: Zero3 leaves the parameters zero-element between steps.
  std::int64_t parameter_count = 0, gradient_bytes = 0;
  for (const auto& p : net->parameters()) {
    parameter_count += p.numel();
    if (p.requires_grad()) gradient_bytes += p.numel() * p.element_size();
  }
  return with_optimizer(c, *net, [&](auto& user_optimizer, GptSchedule* schedule) {
    auto [model, optimizer] = acc.prepare(net, user_optimizer);
    // gpt's schedule, prepared: it steps once per optimizer step, also under accumulation.
    std::optional<decltype(acc.prepare(*schedule))> scheduler;
    if (schedule != nullptr) scheduler.emplace(acc.prepare(*schedule));
    const double prepare_peak_rss_mb = peak_rss_mb();  // where a sharded strategy's peak may be
    if (c.timeline) {
      const char* tmp = std::getenv("TMPDIR");
      acc.start_timeline({.samples_per_step = static_cast<double>(c.batch * world * c.accum)});
      acc.init_trackers("accel_bench", {{"model", c.model}, {"strategy", c.strategy}},
                        {.log_dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/accel-bench-runs"});
    }

    if (rank == 0)
      fmt::print(stderr, "accel_bench: model={} parameters={} world_size={} strategy={} "
                 "optimizer={} precision={} accum={} compress={} bucket_views={} "
                 "shared_buckets={} small_bucket_kb={} tune_cpu_heap={} offload={}\n",
                 c.model, parameter_count, world, c.strategy, c.optimizer, c.precision, c.accum,
                 c.compress, c.bucket_views, c.shared_buckets, c.small_bucket_kb, c.tune_heap,
                 c.offload);

    // Synthetic data, generated once per rank, deterministic.
    torch::manual_seed(1000 + static_cast<std::uint64_t>(rank));
    constexpr int kBatches = 8;
    std::vector<torch::Tensor> inputs, labels;
    for (int i = 0; i < kBatches; ++i) {
      Batch batch = make_batch(c);
      inputs.push_back(batch.input.to(acc.device()));
      labels.push_back(batch.labels.to(acc.device()));
    }
    // CUDA runs the step asynchronously: the clock reads after the device is done.
    const auto wait_for_device = [&] {
      if (acc.device().is_cuda()) torch::cuda::synchronize(acc.device().index());
    };

    Breakdown parts;
    if (c.breakdown) parts.install(net->parameters());
    std::size_t cursor = 0;
    auto optimizer_step = [&](bool timed) {
      for (int m = 0; m < c.accum; ++m, ++cursor) {
        const auto t0 = Clock::now();
        const torch::Tensor loss =
            loss_of(c, model(inputs[cursor % kBatches]), labels[cursor % kBatches]);
        const auto t1 = Clock::now();
        acc.backward(loss);
        const auto t2 = Clock::now();
        const auto finalized = timed && c.breakdown ? parts.threads.read()
                                                    : std::pair<double, double>{};
        optimizer.step();
        if (scheduler) scheduler->step();  // counted with the optimizer step
        const auto t3 = Clock::now();
        optimizer.zero_grad();
        if (timed && c.breakdown) {
          const auto t4 = Clock::now();
          parts.forward += seconds(t1 - t0);
          parts.backward += seconds(parts.last_hook - t1);
          parts.finalize += seconds(t2 - parts.last_hook);
          parts.finalize_cpu += finalized.first - parts.last_hook_times.first;
          parts.finalize_queued += finalized.second - parts.last_hook_times.second;
          parts.step += seconds(t3 - t2);
          parts.zero_grad += seconds(t4 - t3);
        }
      }
    };

    // --alternate-checkpointing: step i checkpoints when i is odd, on every rank alike.
    const std::int64_t checkpointed_blocks = net->checkpointed_blocks;
    auto choose_checkpointing = [&](int i) {
      if (c.alternate_checkpointing) net->checkpointed_blocks = i % 2 ? checkpointed_blocks : 0;
    };
    for (int i = 0; i < c.warmup; ++i) {
      choose_checkpointing(i);
      optimizer_step(false);
    }
    acc.wait_for_everyone();
    wait_for_device();
    if (c.breakdown) parts.threads.open_all();
    std::vector<double> step_seconds[2];  // without, with checkpointing (alternating only)
    const Usage usage_start = Usage::now();
    const auto start = Clock::now();
    for (int i = 0; i < c.steps; ++i) {
      choose_checkpointing(i);
      const auto t0 = Clock::now();
      optimizer_step(true);
      if (c.alternate_checkpointing) wait_for_device();
      step_seconds[i % 2].push_back(seconds(Clock::now() - t0));
    }
    wait_for_device();
    const double elapsed = seconds(Clock::now() - start);
    const Usage usage_end = Usage::now();
    acc.wait_for_everyone();
    if (c.alternate_checkpointing && rank == 0) {
      const auto median = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
      };
      const double without = median(step_seconds[0]), with = median(step_seconds[1]);
      fmt::print("checkpointing: step_ms_without={:.1f} step_ms_with={:.1f} ratio={:.3f} "
                 "(medians of {} and {} alternating steps, {} of {} blocks checkpointed)\n",
                 1e3 * without, 1e3 * with, with / without, step_seconds[0].size(),
                 step_seconds[1].size(), checkpointed_blocks, c.layers);
    }

    const double steps_per_s = c.steps / elapsed;
    const double samples_per_s =
        steps_per_s * static_cast<double>(c.batch) * world * static_cast<double>(c.accum);

    if (c.breakdown) {
      // Reference costs of the same step, measured on every rank at once (so under the same
      // contention for the two cores): backward alone, with the Reducer idle (a plain
      // loss.backward() outside acc.backward: its hooks return at once), and a blocking
      // all-reduce of all the gradients at once with no compute beside it.
      const int probe = std::max(5, c.steps / 4);
      double plain_backward = 0, allreduce_alone = 0, allreduce_cpu = 0, local_copies = 0;
      for (int i = 0; i < probe; ++i, ++cursor) {
        const torch::Tensor loss =
            loss_of(c, model(inputs[cursor % kBatches]), labels[cursor % kBatches]);
        const auto t0 = Clock::now();
        loss.backward();
        plain_backward += seconds(Clock::now() - t0);
        torch::NoGradGuard no_grad;
        for (auto& p : net->parameters())
          if (p.grad().defined()) p.mutable_grad().zero_();
      }
      torch::Tensor flat = torch::ones({gradient_bytes / 4});
      torch::Tensor other = torch::empty_like(flat);
      for (int i = 0; i < probe; ++i) {
        const auto t0 = Clock::now();
        other.copy_(flat);  // the hooks' copies into the buckets
        other.mul_(0.5);    // averaging
        flat.copy_(other);  // writing back into .grad
        local_copies += seconds(Clock::now() - t0);
      }
      if (auto* group = accel::testing::internals(acc).process_group()) {
        group->barrier();
        const Usage before = Usage::now();
        for (int i = 0; i < probe; ++i) {
          const auto t0 = Clock::now();
          group->allreduce(flat);
          allreduce_alone += seconds(Clock::now() - t0);
        }
        allreduce_cpu = Usage::now().cpu - before.cpu;
      }
      const std::vector<double> mine = {parts.forward / c.steps,    parts.backward / c.steps,
                                        parts.finalize / c.steps,   parts.step / c.steps,
                                        parts.zero_grad / c.steps,  elapsed / c.steps,
                                        plain_backward / probe * c.accum,
                                        allreduce_alone / probe,    local_copies / probe,
                                        (usage_end.faults - usage_start.faults) / c.steps,
                                        (usage_end.cpu - usage_start.cpu) / elapsed,
                                        allreduce_alone > 0 ? allreduce_cpu / allreduce_alone : 0.0,
                                        parts.finalize_cpu / c.steps,
                                        parts.finalize_queued / c.steps};
      const auto all = acc.gather_object(mine);
      if (rank == 0) {
        // On the wire: the gradients' own dtype (fp32), or fp16/bf16 with --compress.
        const std::int64_t wire_bytes =
            world == 1 ? 0 : c.compress == "none" ? gradient_bytes : gradient_bytes / 2;
        const double ring_bytes = 2.0 * (world - 1) / world * static_cast<double>(wire_bytes);
        fmt::print("breakdown: model={} world_size={} accum={} per optimizer step, milliseconds "
                   "(forward includes the loss; backward includes the Reducer's hook copies and "
                   "launches; finalize is acc.backward() after autograd's last hook: waiting for "
                   "the all-reduces, averaging, writing back)\n",
                   c.model, world, c.accum);
        for (int r = 0; r < world; ++r) {
          const auto& v = all[static_cast<std::size_t>(r)];
          const double accounted = v[0] + v[1] + v[2] + v[3] + v[4];
          fmt::print("breakdown: rank={} forward={:.3f} backward={:.3f} finalize={:.3f} "
                     "optimizer_step={:.3f} zero_grad={:.3f} other={:.3f} total={:.3f} | "
                     "reference: backward_without_reducer={:.3f} allreduce_alone={:.3f} "
                     "local_copies={:.3f} | page_faults_per_step={:.0f} cores_busy={:.2f} "
                     "cores_busy_in_allreduce_alone={:.2f} | finalize_cpu={:.3f} "
                     "finalize_queued={:.3f} finalize_idle={:.3f}\n",
                     r, 1e3 * v[0], 1e3 * v[1], 1e3 * v[2], 1e3 * v[3], 1e3 * v[4],
                     1e3 * (v[5] - accounted), 1e3 * v[5], 1e3 * v[6], 1e3 * v[7], 1e3 * v[8],
                     v[9], v[10], v[11], 1e3 * v[12], 1e3 * v[13],
                     1e3 * (v[2] - v[12] - v[13]));
        }
        fmt::print("breakdown: allreduced_bytes_per_step={} ({:.2f} MB, {} all-reduce(s) of "
                   "gradients in {}) ring_bytes_sent_per_rank={:.0f}\n",
                   wire_bytes, static_cast<double>(wire_bytes) / 1e6,
                   world > 1 ? "bucketed" : "no", c.compress == "none" ? "fp32" : c.compress,
                   ring_bytes);
      }
    }

    // What this rank holds for training after its last step (each storage once).
    const accel::MemoryUse use = acc.memory_use();
    if (rank == 0)
      fmt::print("memory_use: parameters_mb={:.1f} gradients_mb={:.1f} optimizer_state_mb={:.1f} "
                 "offloaded_mb={:.1f} total_mb={:.1f} (rank 0, after the last step)\n",
                 use.parameters / 1e6, use.gradients / 1e6, use.optimizer_state / 1e6,
                 use.offloaded / 1e6, use.total() / 1e6);
    if (!c.checkpoint.empty()) {
      // save_state and load_state of everything prepared, timed from barrier to barrier.
      const std::filesystem::path folder = std::filesystem::path(c.checkpoint) / "state";
      acc.wait_for_everyone();
      const auto save_start = Clock::now();
      acc.save_state(folder);
      acc.wait_for_everyone();
      const double save_s = seconds(Clock::now() - save_start);
      const auto load_start = Clock::now();
      acc.load_state(folder);
      acc.wait_for_everyone();
      const double load_s = seconds(Clock::now() - load_start);
      std::uintmax_t bytes = 0;
      for (const auto& entry : std::filesystem::directory_iterator(folder)) bytes += entry.file_size();
      // The consolidated weights from the state just loaded, as a program merges a checkpoint:
      // every rank gathers, the main process writes.
      std::string save_model;
      if (c.save_model) {
        const auto save_model_start = Clock::now();
        acc.save_model(net, std::filesystem::path(c.checkpoint) / "model");
        acc.wait_for_everyone();
        save_model = fmt::format(" save_model_s={:.3f}", seconds(Clock::now() - save_model_start));
      }
      if (rank == 0)
        fmt::print("checkpoint: save_s={:.3f} load_s={:.3f} bytes={}{}\n", save_s, load_s, bytes,
                   save_model);
    }
    if (rank == 0 && (c.model == "xfmr" || c.model == "gpt")) {
      // Model FLOPs (PaLM's appendix B): 6 per parameter per token for forward and backward,
      // and 12 x layers x seq x hidden per token for attention's two matmuls; rematerialized
      // FLOPs not counted.
      const double tokens_per_s = samples_per_s * static_cast<double>(c.seq);
      const double flops_per_token = 6.0 * static_cast<double>(parameter_count) +
                                     12.0 * static_cast<double>(c.layers * c.seq * c.hidden);
      fmt::print("tokens: tokens_per_s={:.0f} model_tflops_per_s_per_rank={:.2f}\n", tokens_per_s,
                 tokens_per_s * flops_per_token / 1e12 / world);
    }
#if ACCEL_BENCH_CUDA
    if (rank == 0 && acc.device().is_cuda())
      fmt::print("device_memory: peak_allocated_mb={:.1f} (rank 0's CUDA caching allocator)\n",
                 static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(
                                         acc.device().index())
                                         .allocated_bytes[0]
                                         .peak) /
                     1e6);
#endif
    if (c.timeline) acc.end_training();
    // Every rank's peak RSS (a sharded strategy's ranks need not peak alike), and tokens/s for
    // the language model, on the last line, which bench/run.sh tables.
    const auto rank_peaks = acc.gather_object(std::vector<double>{peak_rss_mb()});
    if (rank == 0) {
      std::string peaks, tokens;
      for (const auto& peak : rank_peaks)
        peaks += fmt::format("{}{:.1f}", peaks.empty() ? "" : ",", peak.at(0));
      if (c.model == "gpt")
        tokens = fmt::format(" tokens_per_s={:.1f}", samples_per_s * static_cast<double>(c.seq));
      fmt::print("steps_per_s={:.3f} samples_per_s={:.1f}{} peak_rss_mb={:.1f} "
                 "peak_rss_after_prepare_mb={:.1f} rank_peak_rss_mb={}\n",
                 steps_per_s, samples_per_s, tokens, peak_rss_mb(), prepare_peak_rss_mb, peaks);
    }
    std::fflush(stdout);
    return 0;
  });
}

// The same training without accel: what the Accelerator's cost is measured against.
int train_plain(const Config& c) {
  if (std::getenv("WORLD_SIZE") != nullptr && std::atoi(std::getenv("WORLD_SIZE")) > 1)
    usage_error("--plain runs one process; drop --nproc");
  if (c.precision != "fp32") usage_error("--plain trains in fp32 only");
  if (c.model == "gpt")
    usage_error("--plain trains mlp, tiny and xfmr; --model gpt runs through the Accelerator "
                "only (its one-process run, without --plain, is the reference)");
  if (c.optimizer != "sgd") usage_error("--plain trains with sgd only");
  if (c.pin) pin_to_core();
  torch::set_num_threads(c.threads);
  limit_blas_threads(c.threads);
  torch::manual_seed(0);
  BenchNet net(c);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01));
  torch::manual_seed(1000);
  constexpr int kBatches = 8;
  std::vector<torch::Tensor> inputs, labels;
  for (int i = 0; i < kBatches; ++i) {
    Batch batch = make_batch(c);
    inputs.push_back(std::move(batch.input));
    labels.push_back(std::move(batch.labels));
  }
  std::size_t cursor = 0;
  auto optimizer_step = [&] {
    sgd.zero_grad();
    for (int m = 0; m < c.accum; ++m, ++cursor) {
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          net->forward(inputs[cursor % kBatches]), labels[cursor % kBatches]);
      if (c.accum > 1) loss = loss * (1.0 / c.accum);
      loss.backward();
    }
    sgd.step();
  };
  for (int i = 0; i < c.warmup; ++i) optimizer_step();
  const auto start = Clock::now();
  for (int i = 0; i < c.steps; ++i) optimizer_step();
  const double steps_per_s = c.steps / seconds(Clock::now() - start);
  fmt::print("steps_per_s={:.3f} samples_per_s={:.1f} peak_rss_mb={:.1f}\n", steps_per_s,
             steps_per_s * static_cast<double>(c.batch * c.accum), peak_rss_mb());
  std::fflush(stdout);
  return 0;
}

// The parallelism policies benchmarked with accumulation (parse() refuses --accum for the others).
template <class Par>
inline constexpr bool benchmarks_accumulation =
    std::is_same_v<Par, accel::Ddp> || std::is_same_v<Par, accel::Zero2> ||
    std::is_same_v<Par, accel::Zero3>;

template <class Par, class Prec>
int with_accum(const Config& c) {
  if constexpr (!benchmarks_accumulation<Par> || !kAllVariants) {
    return train<accel::Accelerator<Par, Prec>>(c);
  } else {
    switch (c.accum) {
      case 2: return train<accel::Accelerator<Par, Prec, accel::GradAccum<2>>>(c);
      case 4: return train<accel::Accelerator<Par, Prec, accel::GradAccum<4>>>(c);
      default: return train<accel::Accelerator<Par, Prec, accel::GradAccum<1>>>(c);
    }
  }
}

template <class Par>
int with_precision(const Config& c) {
  if (c.precision == "bf16") return with_accum<Par, accel::Bf16>(c);
  if (c.precision == "fp16") return with_accum<Par, accel::Fp16>(c);
  if (c.precision == "fp8") return train<accel::Accelerator<Par, accel::Fp8>>(c);
  return with_accum<Par, accel::Fp32>(c);
}

int run(int argc, char** argv) {
  const Config c = parse(argc, argv);
  try {
    if (c.plain) return train_plain(c);
    if (c.strategy == "ddp" && c.compress == "fp16")
      return with_precision<accel::DdpWith<accel::CompressFp16>>(c);
    if (c.strategy == "ddp" && c.compress == "bf16")
      return with_precision<accel::DdpWith<accel::CompressBf16>>(c);
    if (c.strategy == "ddp") return with_precision<accel::Ddp>(c);
    if (c.strategy == "zero2") return with_precision<accel::Zero2>(c);
    if (c.strategy == "zero3") return with_precision<accel::Zero3>(c);
    if (c.strategy == "fsdp") return with_precision<accel::Fsdp<accel::FullShard>>(c);
    usage_error(fmt::format("--strategy '{}': use ddp, zero2, zero3 or fsdp", c.strategy));
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}\n", error.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "-h" || arg == "--help") {
      fmt::print("{}", kUsage);
      return 0;
    }
  }
  return accel::launch(argc, argv, run);
}
