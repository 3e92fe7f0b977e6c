// A small GPT with accel: a byte-level decoder-only transformer trained on the fortunes of
// Debian's `fortunes` package (or any text: --text, or --stream for a corpus read as it trains),
// with a plain libtorch training loop plus a handful of accel lines. The strategy is a type
// alias; the binary carries every combination the Fashion-MNIST example does
// (common/variants.hpp), picked at run time:
//   gpt --strategy zero3 --precision bf16 --accum 2
//   gpt --nproc 2 --strategy zero3
//   gpt --nproc 4 --strategy zero3 --tp 2      (tensor parallelism inside pairs of processes)
// Its transformer blocks are accel::Sharded units (model.hpp): under Zero3 and Fsdp<FullShard>
// each is gathered only for its own forward and backward. docs/gpt.md describes the example.
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>
#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/command_line.hpp"
#include "common/fault_injection.hpp"
#include "common/variants.hpp"
#include "corpus.hpp"
#include "model.hpp"

namespace fs = std::filesystem;

namespace {

// --- The command line ----------------------------------------------------------------------------

// The readers and the flags both examples share (common/command_line.hpp); a BadArgument ends the
// program with status 2, as a usage error does, before any training starts.
using examples::BadArgument;
using examples::whole_number;
// Flags that are each well formed but contradict each other: status 2 as well, with the message
// alone (the usage text would bury it; the message names both flags).
struct FlagConflict : BadArgument {
  using BadArgument::BadArgument;
};

// The peak the MFU figure is measured against, per process, when --peak-tflops is not given:
// on CPU, per intra-op thread, an AVX-512 core with two FMA units at 2.6 GHz in fp32 (16 lanes x
// 2 FLOPs x 2 units x 2.6e9 = 166 GFLOP/s: the development machine's Xeon); on CUDA, an H100 /
// H200's dense bf16 tensor-core peak.
constexpr double kCpuPeakTflopsPerThread = 0.1664;
constexpr double kCudaPeakTflops = 989.0;

struct Args {
  std::string strategy = "ddp";
  std::string precision = "fp32";
  int accum = 1;
  std::int64_t steps = 1000;        // optimizer steps in all
  std::int64_t batch_size = 32;     // windows per micro-batch and process
  std::int64_t seq = 64;            // bytes of context; a window is seq + 1 bytes
  std::int64_t layers = 4;
  std::int64_t hidden = 128;
  std::int64_t heads = 4;
  bool tied_head = true;
  int tp = 1;                       // tensor-parallel degree: processes each block is split across
  bool sequence_parallel = false;   // with --tp: LayerNorms and the residual stream by sequence
  double lr = 6e-3;                 // peak learning rate (AdamW), after the warmup
  std::int64_t warmup = 0;          // optimizer steps of linear warmup, then a cosine to lr / 10
  bool warmup_given = false;        // unset: a tenth of --decay-steps, at most kDefaultWarmup
  std::optional<std::int64_t> decay_steps;  // where the cosine reaches lr / 10; unset: --steps
  double weight_decay = 0.1;        // on the Linear layers' weight matrices only
  double clip = 1.0;                // gradient clipping: the global norm's bound
  std::uint64_t seed = 42;
  std::optional<fs::path> text;     // unset: the fortunes
  std::optional<fs::path> stream;   // a folder streamed through accel::StreamingLoader
  std::int64_t eval_every = 250;    // optimizer steps between validation runs; 0: at the end only
  std::int64_t eval_windows = 0;    // validation windows; 0: all of them
  std::int64_t sample_tokens = 300; // bytes sampled at the end; 0: no sample
  double temperature = 0.8;
  std::int64_t top_k = 40;
  std::string prompt;               // empty: a new fortune (after a "%" line)
  std::optional<double> peak_tflops;
  std::optional<int> threads;       // unset: OMP_NUM_THREADS, else 1
  bool tracking = false;            // metrics to <log dir>/gpt/<run>/ (accel-plot)
  std::optional<fs::path> log_dir;  // unset: ACCEL_LOG_DIR, else ./runs
  std::string run_name;             // empty: the UTC start time
  // the writers: --log-with jsonl,csv,tensorboard or all
  std::vector<accel::tracking::Backend> log_with = {accel::tracking::Backend::jsonl,
                                                    accel::tracking::Backend::csv};
  std::int64_t log_every = 10;      // optimizer steps between two rows of metrics
  bool progress = true;
  std::optional<fs::path> checkpoint_dir;  // checkpoints as checkpoint_<n> under it
  std::int64_t checkpoint_every = 0;       // optimizer steps between checkpoints; 0: at the end
  bool async_checkpoint = false;           // those saves written in the background
  bool resume = false;                     // from the newest checkpoint under checkpoint_dir
  // --keep-global-batch W: --accum is for W processes; on P processes the run takes
  // W * accum / P micro-batches per step, so a restart on fewer processes keeps the global batch.
  std::optional<int> keep_global_batch;
  bool profile = false;  // the step timeline in the run's metrics, a trace per rank of steps 3-5
  bool help = false;
};

constexpr std::int64_t kMaxSeq = 1 << 16;
// --warmup when it is not given: a tenth of the schedule (--decay-steps, else --steps), at most
// this, so that a short run warms up in proportion instead of being refused.
constexpr std::int64_t kDefaultWarmup = 100;
constexpr std::int64_t kDefaultWarmupDivisor = 10;  // "a tenth" in --help and docs/gpt.md
// Training windows start every max(--seq, kMinWindowStride) bytes of the training stream: the
// loader's shuffled order holds 8 bytes (an int64 index) per window, and as an epoch begins the
// prepared loader briefly holds two copies of it, so at most one byte per byte of text.
constexpr std::int64_t kMinWindowStride = 16;
// --stream: windows each reader holds and draws from at random (a window of one shard mixes with
// its next 1023, not across the corpus: the shard order is shuffled each epoch as well), and one
// reading thread ahead of the loop. A checkpoint taken with them resumes only with them.
constexpr std::int64_t kStreamShuffleBuffer = 1024;
constexpr int kStreamWorkers = 1;
constexpr std::int64_t kMaxBatch = 1 << 20;
constexpr std::int64_t kMaxWidth = 1 << 16;
constexpr int kMaxThreads = 1024;
constexpr int kMaxTensorParallel = 1024;

// --- Tensor parallelism: the strategies --tp picks among ----------------------------------------

// --tp N with --strategy S runs Parallel<S, TensorParallel<N>>; a type each, so the example
// compiles a few: these degrees and strategies, fp32 and bf16, --accum 1 and 2.
using TensorParallelDegrees = std::integer_sequence<int, 2, 4>;
using TensorParallelOuter = std::tuple<accel::Ddp, accel::Zero3>;
using TensorParallelPrecisions = std::tuple<accel::Fp32, accel::Bf16>;
using TensorParallelAccumulations = std::integer_sequence<int, 1, 2>;

template <class Par, class Prec, int... A>
auto tp_accumulations(std::integer_sequence<int, A...>)
    -> std::tuple<accel::Accelerator<Par, Prec, accel::GradAccum<A>>...>;
template <class Par, class... Prec>
auto tp_precisions(std::tuple<Prec...>)
    -> decltype(std::tuple_cat(tp_accumulations<Par, Prec>(TensorParallelAccumulations{})...));
template <int N, class... Outer>
auto tp_outer(std::tuple<Outer...>)
    -> decltype(std::tuple_cat(
        tp_precisions<accel::Parallel<Outer, accel::TensorParallel<N>>>(
            TensorParallelPrecisions{})...));
template <int... N>
auto tp_degrees(std::integer_sequence<int, N...>)
    -> decltype(std::tuple_cat(tp_outer<N>(TensorParallelOuter{})...));
template <class... Strategies>
auto tp_variants(std::tuple<Strategies...>) -> accel::Variants<Strategies...>;
using TensorParallelMatrix = decltype(tp_variants(tp_degrees(TensorParallelDegrees{})));

template <class... T>
std::vector<std::string_view> tp_flags(std::type_identity<std::tuple<T...>>) {
  return {examples::Named<T>::flag...};
}
template <int... N>
std::vector<int> tp_values(std::integer_sequence<int, N...>) {
  return {N...};
}

// What --help says --tp takes.
std::string tensor_parallel_choices() {
  return fmt::format("{} with --strategy {}, --precision {}, --accum {}",
                     examples::joined(tp_values(TensorParallelDegrees{})),
                     examples::joined(tp_flags(std::type_identity<TensorParallelOuter>{})),
                     examples::joined(tp_flags(std::type_identity<TensorParallelPrecisions>{})),
                     examples::joined(tp_values(TensorParallelAccumulations{})));
}

// The compiled variant's name for these flags: "Parallel<Zero3,TensorParallel<2>>,Fp32,1".
std::string tensor_parallel_variant(std::string_view strategy, int tp, std::string_view precision,
                                    int accum) {
  return fmt::format(
      "Parallel<{},TensorParallel<{}>>,{},{}",
      examples::policy_name(strategy, std::type_identity<examples::Parallelisms>{}), tp,
      examples::policy_name(precision, std::type_identity<examples::Precisions>{}), accum);
}

std::string usage_text() {
  const Args d;
  return fmt::format(
      "usage: gpt [flags]\n"
      "  --nproc N            worker processes on this machine (default 1, or ACCEL_NPROC)\n"
      "  --strategy S         {} (default ddp)\n"
      "  --precision P        {} (default fp32)\n"
      "  --accum N            micro-batches per optimizer step: {} (default 1)\n"
      "  --steps N            optimizer steps, at least 1 (default {})\n"
      "  --batch-size N       windows per micro-batch and process, 1 to {} (default {})\n"
      "  --seq N              bytes of context, 1 to {}; a window is N + 1 bytes (default {})\n"
      "  --layers N           transformer blocks, at least 1 (default {})\n"
      "  --hidden N           width, a multiple of --heads (default {})\n"
      "  --heads N            attention heads (default {})\n"
      "  --untied-head        an output Linear of its own instead of the token embedding\n"
      "  --tp N               tensor parallelism: each block's attention heads and MLP split\n"
      "                       across groups of N processes, --strategy across the groups; N\n"
      "                       divides --heads and the process count (default 1). Compiled:\n"
      "                       {}\n"
      "  --sequence-parallel  with --tp: the LayerNorms and the residual stream split along\n"
      "                       the sequence as well; N divides --seq\n"
      "  --lr X               AdamW's peak learning rate, above 0 (default {})\n"
      "  --warmup N           steps of linear warmup, 0 to --decay-steps; then a cosine down to\n"
      "                       lr/10 at --decay-steps (default: a tenth of --decay-steps, at most\n"
      "                       {})\n"
      "  --decay-steps N      the step where the cosine reaches lr/10, at least 1; the lr stays\n"
      "                       there after it. A run cut short by --steps, to be resumed, keeps\n"
      "                       the full run's schedule with it (default: --steps)\n"
      "  --weight-decay X     AdamW's decay of the Linear weight matrices, 0 or more; none on\n"
      "                       biases, LayerNorms and embeddings (default {})\n"
      "  --clip X             bound on the gradients' global norm, above 0 (default {})\n"
      "  --seed N             0 to {} (default {})\n"
      "  --text PATH          train on a file, or on the files of a folder, instead of the\n"
      "                       fortunes in {}\n"
      "  --stream DIR         train on the files of DIR read as the run goes, window by window\n"
      "                       (accel::StreamingLoader), none of them loaded whole; the last file\n"
      "                       by name is the validation split, the others the training shards\n"
      "  --eval-every N       steps between validation runs; 0: at the end only (default {})\n"
      "  --eval-windows N     validation windows of --seq + 1 bytes, evenly spread over the\n"
      "                       validation text; 0: all of them (default 0)\n"
      "  --sample-tokens N    bytes to sample at the end; 0: none (default {})\n"
      "  --temperature X      sampling temperature, above 0 (default {})\n"
      "  --top-k N            sample among the N likeliest bytes; 0: all 256 (default {})\n"
      "  --prompt TEXT        the sample's beginning (default: a new fortune)\n"
      "  --peak-tflops X      peak TFLOP/s per process for the MFU figure (default: {} per CPU\n"
      "                       thread, {} per CUDA device)\n"
      "  --threads N          CPU threads per process, torch's and OpenBLAS's, 1 to {} (default:\n"
      "                       OMP_NUM_THREADS, else 1)\n"
      "  --with-tracking      log losses, learning rate, tokens/s and MFU to a run folder\n"
      "  --log-dir DIR        the folder of runs, implies --with-tracking (default: ACCEL_LOG_DIR,\n"
      "                       else ./runs)\n"
      "  --run-name NAME      the run's folder name, implies --with-tracking (default: the UTC\n"
      "                       start time)\n"
      "  --log-with LIST      the trackers, implies --with-tracking: a comma list of jsonl,\n"
      "                       csv and tensorboard (TensorBoard's event file), or all (default:\n"
      "                       jsonl,csv)\n"
      "  --log-every N        optimizer steps between two logged rows, at least 1 (default {})\n"
      "  --no-progress        no progress bar or progress lines\n"
      "  --profile            log each step's time in data, forward, backward, communication,\n"
      "                       optimizer and idle per rank (the timeline; accel-plot draws it), and\n"
      "                       write a Chrome trace per rank of steps 3 to 5 into the run folder;\n"
      "                       implies --with-tracking (docs/how-to/profiling.md)\n"
      "  --checkpoint-dir DIR save_state() into DIR/checkpoint_<n> every --checkpoint-every\n"
      "                       steps and at the end\n"
      "  --checkpoint-every N optimizer steps between checkpoints, at least 1 (default: only at\n"
      "                       the end)\n"
      "  --async-checkpoint   write those checkpoints in the background: the loop waits only for\n"
      "                       a copy of the state in memory (docs/how-to/fault-tolerance.md)\n"
      "  --resume             continue from the newest checkpoint of this run in\n"
      "                       --checkpoint-dir when it holds one, start afresh when it holds\n"
      "                       none (one command line for the first start and every restart);\n"
      "                       --steps stays the run's total\n"
      "  --keep-global-batch W  --accum is for W processes: on P processes, run W x accum / P\n"
      "                       micro-batches per step (refused unless a whole number this build\n"
      "                       compiled), so a restart on fewer processes keeps the global batch\n",
      examples::joined(examples::strategy_flags()), examples::joined(examples::precision_flags()),
      examples::joined(examples::accumulation_values()), d.steps, kMaxBatch, d.batch_size, kMaxSeq, d.seq, d.layers, d.hidden, d.heads,
      tensor_parallel_choices(), d.lr,
      kDefaultWarmup, d.weight_decay, d.clip, std::numeric_limits<std::uint64_t>::max(), d.seed,
      gpt::kFortunesDir, d.eval_every, d.sample_tokens, d.temperature, d.top_k,
      kCpuPeakTflopsPerThread, kCudaPeakTflops, kMaxThreads, d.log_every);
}

// A finite number above 0 (or, with zero_ok, at least 0).
double real_number(std::string_view flag, std::string_view text, bool zero_ok = false) {
  return examples::real_number(flag, text, "0.1", zero_ok);
}

// The processes the launcher started (WORLD_SIZE; 1 without a launcher).
int launched_processes() {
  const char* world = std::getenv("WORLD_SIZE");
  return world != nullptr && *world != '\0' ? std::max(1, std::atoi(world)) : 1;
}

// --tp and --sequence-parallel against the model, the process count and what was compiled: each
// a FlagConflict (status 2) naming the value and the fix, before anything is made.
void check_tensor_parallel_flags(const Args& args) {
  if (args.sequence_parallel && args.tp == 1)
    throw FlagConflict("accel: --sequence-parallel splits the sequence across a tensor-parallel "
                       "group, and --tp is 1; add --tp N (N of 2 or more), or leave out "
                       "--sequence-parallel");
  if (args.tp == 1) return;
  if (args.heads % args.tp != 0)
    throw FlagConflict(fmt::format(
        "accel: --tp {} does not divide --heads {}: each process of a tensor-parallel group "
        "computes heads / tp whole heads; use a --tp that divides {}, or --heads a multiple of {}",
        args.tp, args.heads, args.heads, args.tp));
  if (args.sequence_parallel && args.seq % args.tp != 0)
    throw FlagConflict(fmt::format(
        "accel: --sequence-parallel with --tp {} splits each window's --seq {} bytes across the "
        "group, which {} does not divide; use a --seq that is a multiple of {}",
        args.tp, args.seq, args.tp, args.tp));
  if (args.keep_global_batch)
    throw FlagConflict(fmt::format(
        "accel: --keep-global-batch {} counts processes as data-parallel replicas, which --tp {} "
        "groups; leave out --keep-global-batch with --tp",
        *args.keep_global_batch, args.tp));
  const std::vector<std::string> compiled = TensorParallelMatrix::names();
  const std::string wanted = tensor_parallel_variant(args.strategy, args.tp, args.precision,
                                                     args.accum);
  if (std::find(compiled.begin(), compiled.end(), wanted) == compiled.end())
    throw FlagConflict(fmt::format(
        "accel: --tp {} with --strategy {} --precision {} --accum {} ({}) is not compiled into "
        "this example; it has --tp {}; pick one of those, or add the combination to "
        "TensorParallelDegrees, TensorParallelOuter, TensorParallelPrecisions or "
        "TensorParallelAccumulations in examples/gpt/main.cpp and rebuild",
        args.tp, args.strategy, args.precision, args.accum, wanted, tensor_parallel_choices()));
  if (const int processes = launched_processes(); processes % args.tp != 0)
    throw FlagConflict(fmt::format(
        "accel: --tp {} does not divide the {} process{} of this run: a tensor-parallel group is "
        "--tp processes; start a multiple of {} processes (--nproc), or use a --tp that divides {}",
        args.tp, processes, processes == 1 ? "" : "es", args.tp, processes));
}

// accel::launch has already taken `--nproc N` out of argv (and refused a bad one with status 2).
Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&] { return examples::flag_value(argc, argv, i); };
    if (examples::shared_flag(args, flag, value)) continue;
    using I = std::int64_t;
    if (flag == "--steps") args.steps = whole_number<I>(flag, value(), 1);
    else if (flag == "--batch-size") args.batch_size = whole_number<I>(flag, value(), 1, kMaxBatch);
    else if (flag == "--seq") args.seq = whole_number<I>(flag, value(), 1, kMaxSeq);
    else if (flag == "--layers") args.layers = whole_number<I>(flag, value(), 1, 1024);
    else if (flag == "--hidden") args.hidden = whole_number<I>(flag, value(), 1, kMaxWidth);
    else if (flag == "--heads") args.heads = whole_number<I>(flag, value(), 1, kMaxWidth);
    else if (flag == "--untied-head") args.tied_head = false;
    else if (flag == "--tp") args.tp = whole_number(flag, value(), 1, kMaxTensorParallel);
    else if (flag == "--sequence-parallel") args.sequence_parallel = true;
    else if (flag == "--lr") args.lr = real_number(flag, value());
    else if (flag == "--warmup") {
      args.warmup = whole_number<I>(flag, value(), 0);
      args.warmup_given = true;
    }
    else if (flag == "--decay-steps") args.decay_steps = whole_number<I>(flag, value(), 1);
    else if (flag == "--weight-decay") args.weight_decay = real_number(flag, value(), true);
    else if (flag == "--clip") args.clip = real_number(flag, value());
    else if (flag == "--seed") args.seed = whole_number<std::uint64_t>(flag, value(), 0);
    else if (flag == "--text") args.text = fs::path(value());
    else if (flag == "--stream") args.stream = fs::path(value());
    else if (flag == "--eval-every") args.eval_every = whole_number<I>(flag, value(), 0);
    else if (flag == "--eval-windows") args.eval_windows = whole_number<I>(flag, value(), 0);
    else if (flag == "--sample-tokens") args.sample_tokens = whole_number<I>(flag, value(), 0);
    else if (flag == "--temperature") args.temperature = real_number(flag, value());
    else if (flag == "--top-k") args.top_k = whole_number<I>(flag, value(), 0, gpt::kVocabulary);
    else if (flag == "--prompt") args.prompt = value();
    else if (flag == "--peak-tflops") args.peak_tflops = real_number(flag, value());
    else if (flag == "--threads") args.threads = whole_number(flag, value(), 1, kMaxThreads);
    else if (flag == "--profile") args.profile = args.tracking = true;
    else if (flag == "--keep-global-batch")
      args.keep_global_batch = whole_number(flag, value(), 1, 1'000'000);
    else throw BadArgument(fmt::format("unknown flag '{}'", flag));
  }
  if (args.help) return args;
  examples::check_checkpoint_flags(args);
  if (args.text && args.stream)
    throw FlagConflict(fmt::format("--text {} and --stream {} both name the text; give one of them",
                                   args.text->string(), args.stream->string()));
  if (args.hidden % args.heads != 0)
    throw FlagConflict(fmt::format("--hidden is {}, not a multiple of --heads {}; each head "
                                   "takes hidden / heads of the width",
                                   args.hidden, args.heads));
  check_tensor_parallel_flags(args);
  const std::int64_t schedule_steps = args.decay_steps.value_or(args.steps);
  if (!args.warmup_given)
    args.warmup = std::min(kDefaultWarmup, schedule_steps / kDefaultWarmupDivisor);
  else if (args.warmup > schedule_steps)
    throw FlagConflict(fmt::format("--warmup is {}, more than {} {}; lower --warmup, or leave it "
                                   "out for a tenth of {}",
                                   args.warmup, args.decay_steps ? "--decay-steps" : "--steps",
                                   schedule_steps,
                                   args.decay_steps ? "--decay-steps" : "--steps"));
  return args;
}

// --- Data: windows of the byte streams -----------------------------------------------------------

struct Window {
  torch::Tensor tokens;  // seq + 1 bytes as int64: the input is the first seq, the target the last
};

// Training: the windows of the training stream that start every `stride` bytes (--seq, or
// kMinWindowStride for a shorter --seq: with --seq they overlap by the byte one predicts and the
// next one reads, so that an epoch predicts every byte once). The loader shuffles them with
// --seed (accel's splitmix64 shuffle), so the run draws random windows without replacement, the
// same on every machine, and a checkpoint records where it stands. A sample is a window's index,
// not a byte's: the shuffled order costs 8 / stride bytes per byte of text (twice that as an
// epoch begins), and the bytes themselves stay in the page cache (the stream maps the files).
struct TrainWindows {
  gpt::ByteStream bytes;
  std::int64_t window;
  std::int64_t stride;
  std::int64_t size() const { return (bytes.size() - window) / stride + 1; }
  Window get(std::int64_t index) const { return {bytes.tokens(index * stride, window)}; }
};

// Validation: a fixed set of windows. The stream's non-overlapping windows (starts 0, seq, 2 seq,
// ...: every byte predicted once), or `limit` of them evenly spread.
struct ValidationWindows {
  gpt::ByteStream bytes;
  std::int64_t window;
  std::vector<std::int64_t> starts;
  ValidationWindows(gpt::ByteStream bytes_, std::int64_t seq, std::int64_t limit)
      : bytes(std::move(bytes_)), window(seq + 1) {
    const std::int64_t all = (bytes.size() - 1) / seq;  // at least 1: load_corpus checked
    const std::int64_t count = limit > 0 ? std::min(limit, all) : all;
    for (std::int64_t i = 0; i < count; ++i) starts.push_back(i * all / count * seq);
  }
  std::int64_t size() const { return static_cast<std::int64_t>(starts.size()); }
  Window get(std::int64_t i) const {
    return {bytes.tokens(starts[static_cast<std::size_t>(i)], window)};
  }
};

// The sample as it is printed: control bytes other than newline and tab escaped.
std::string printable(const std::string& bytes) {
  std::string text;
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 && c != '\n' && c != '\t') text += fmt::format("\\x{:02x}", byte);
    else text += c;
  }
  return text;
}

// --- The training loop: what a user writes -------------------------------------------------------

template <class Strategy>
int train(const Args& args, const gpt::Corpus& corpus) {
  accel::Options options{.seed = args.seed};
  if (args.checkpoint_dir) options.checkpoints.directory = *args.checkpoint_dir;
  // Every --checkpoint-every steps accel saves where the loop stands between two batches (in the
  // background with --async-checkpoint); --resume loads the newest checkpoint of this run in
  // prepare(), when there is one.
  options.checkpoints.every_steps = args.checkpoint_every;
  options.checkpoints.async = args.async_checkpoint;
  options.checkpoints.resume = args.resume;
  Strategy accelerator(options);

  gpt::Gpt net(gpt::ModelOptions{.layers = args.layers, .hidden = args.hidden,
                                 .heads = args.heads, .context = args.seq,
                                 .tied_head = args.tied_head,
                                 .tensor_parallel = args.tp > 1,
                                 .sequence_parallel = args.sequence_parallel});
  const std::int64_t parameters = gpt::parameter_count(*net);
  // AdamW with two param groups: weight decay on the Linear layers' matrices only.
  const gpt::ParamGroups groups = gpt::weight_decay_groups(*net);
  auto adamw_options = [&](double weight_decay) {
    return torch::optim::AdamWOptions(args.lr).betas({0.9, 0.95}).weight_decay(weight_decay);
  };
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  param_groups.emplace_back(groups.decayed, std::make_unique<torch::optim::AdamWOptions>(
                                                 adamw_options(args.weight_decay)));
  param_groups.emplace_back(groups.not_decayed,
                            std::make_unique<torch::optim::AdamWOptions>(adamw_options(0.0)));
  torch::optim::AdamW adamw(std::move(param_groups), adamw_options(0.0));
  // Linear warmup to --lr, then half a cosine down to lr / 10 at the last step (--decay-steps).
  accel::schedule::CosineWithWarmup schedule(
      adamw, {.warmup_steps = args.warmup,
              .total_steps = args.decay_steps.value_or(args.steps),
              .min_ratio = 0.1});

  // The training loader: the windows of the training stream (map-style), or with --stream the
  // shards' windows as the loader reads them. Prepared before the validation loader either way,
  // so that a checkpoint's loaders are in the same order.
  const std::int64_t window = args.seq + 1;
  std::optional<accel::DataLoader<TrainWindows>> train_data;
  std::optional<accel::StreamingLoader<gpt::StreamShards>> stream_data;
  if (corpus.stream)
    stream_data.emplace(*corpus.stream,
                        accel::StreamingOptions{.batch_size = args.batch_size, .shuffle = true,
                                                .shuffle_buffer = kStreamShuffleBuffer,
                                                .seed = args.seed,
                                                .num_workers = kStreamWorkers});
  else
    train_data.emplace(TrainWindows{corpus.train, window, std::max(args.seq, kMinWindowStride)},
                       accel::LoaderOptions{.batch_size = args.batch_size, .shuffle = true,
                                            .seed = args.seed});
  accel::DataLoader validation_data(
      ValidationWindows(corpus.validation, args.seq, args.eval_windows),
      {.batch_size = args.batch_size});
  auto [model, optimizer, scheduler] = accelerator.prepare(net, adamw, schedule);
  std::optional<decltype(accelerator.prepare(*train_data))> train_batches;
  std::optional<decltype(accelerator.prepare(*stream_data))> stream_batches;
  if (stream_data)
    stream_batches.emplace(accelerator.prepare(*stream_data));
  else
    train_batches.emplace(accelerator.prepare(*train_data));
  auto validation_batches = accelerator.prepare(validation_data);

  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // Resuming brought back the model, AdamW's state, the schedule, the loaders' positions, the RNG
  // and the step count: the run continues exactly where the checkpoint was taken.
  if (const auto& resumed = accelerator.resumed_from()) {
    const fs::path from = *resumed;
    accelerator.print("resumed from {} at step {}", from.string(), accelerator.completed_steps());
    // Nothing left to train: another checkpoint would repeat this one, and the run's results are
    // the ones the run that wrote it printed.
    if (accelerator.completed_steps() >= args.steps) {
      accelerator.print("gpt: the run is complete: {} holds step {} of --steps {}; nothing to "
                        "train and no checkpoint written (raise --steps to train further)",
                        from.string(), accelerator.completed_steps(), args.steps);
      return 0;
    }
  }
  std::int64_t step = accelerator.completed_steps();
  auto checkpoint = [&] {
    if (args.checkpoint_dir) accelerator.print("saved {}", accelerator.save_state().string());
  };

  const auto processes = static_cast<std::int64_t>(accelerator.num_processes());
  // Every process of a tensor-parallel group trains on its group's batch.
  const std::int64_t global_windows = args.batch_size * args.accum * (processes / args.tp);
  const std::int64_t tokens_per_step = global_windows * args.seq;
  const double peak_tflops =
      args.peak_tflops.value_or(accelerator.device().is_cuda()
                                    ? kCudaPeakTflops
                                    : kCpuPeakTflopsPerThread * torch::get_num_threads());
  accelerator.print(
      "gpt: {} parameters ({} layers, hidden {}, {} heads, context {}, {} head); text: {}, "
      "{} training bytes ({} {}), {} validation bytes ({} {}), {} validation windows",
      parameters, args.layers, args.hidden, args.heads, args.seq,
      args.tied_head ? "tied" : "untied", corpus.source, corpus.train_bytes(),
      corpus.train_pieces, corpus.unit, corpus.validation.size(), corpus.validation_pieces,
      corpus.unit, validation_data.num_samples());
  accelerator.print("training {} steps: {} x {} x {}, batch {} x {} bytes, {} process(es) on {}, "
                    "{} thread(s) each; lr warmup {} steps{}",
                    args.steps, Strategy::parallelism_policy::name,
                    Strategy::precision_policy::name, Strategy::accumulation_steps,
                    args.batch_size, args.seq, processes, accelerator.device().str(),
                    torch::get_num_threads(), args.warmup,
                    args.warmup_given
                        ? std::string()
                        : fmt::format(" (a tenth of the {}-step schedule, at most {})",
                                      args.decay_steps.value_or(args.steps), kDefaultWarmup));

  if (args.tracking)
    accelerator.init_trackers(
        "gpt",
        {{"strategy", args.strategy}, {"precision", args.precision}, {"accum", args.accum},
         {"tp", args.tp}, {"sequence_parallel", args.sequence_parallel},
         {"batch_size", args.batch_size}, {"seq", args.seq}, {"layers", args.layers},
         {"hidden", args.hidden}, {"heads", args.heads}, {"tied_head", args.tied_head},
         {"parameters", parameters}, {"lr", args.lr}, {"warmup", args.warmup},
         {"decay_steps", args.decay_steps.value_or(args.steps)},
         {"weight_decay", args.weight_decay}, {"clip", args.clip}, {"seed", args.seed},
         {"steps", args.steps}, {"processes", processes}, {"tokens_per_step", tokens_per_step},
         {"text", corpus.source}, {"threads", torch::get_num_threads()},
         {"peak_tflops_per_process", peak_tflops}},
        {.log_dir = args.log_dir.value_or(fs::path()),
         .run_name = args.run_name,
         .backends = args.log_with});
  // --profile: the timeline's rows beside the metrics (with tokens/s and MFU at every step), and
  // a trace per rank of steps 3 to 5 in the run folder, written when `profile` ends.
  std::optional<accel::profiling::Profile> profile;
  if (args.profile) {
    accelerator.start_timeline(
        {.samples_per_step = static_cast<double>(global_windows),
         .tokens_per_step = static_cast<double>(tokens_per_step),
         .flops_per_sample = 6.0 * static_cast<double>(parameters) * static_cast<double>(args.seq),
         .peak_flops = peak_tflops * 1e12});
    profile.emplace(accelerator.profile(
        {.schedule = accel::ProfileSchedule{.wait = 1, .warmup = 1, .active = 3, .repeat = 1}}));
  }
  accel::Progress progress(accelerator, args.steps,
                           {.mode = args.progress ? accel::ProgressMode::automatic
                                                  : accel::ProgressMode::off,
                            .samples_per_step = global_windows});

  // Mean loss per byte over the validation windows, every window counted once across the ranks.
  double evaluation_seconds = 0;
  auto evaluate = [&]() -> double {
    const double began = seconds();
    torch::NoGradGuard no_grad;
    double sum = 0;
    std::int64_t count = 0;
    for (const auto& batch : validation_batches) {
      const torch::Tensor input = batch.tokens.narrow(1, 0, args.seq);
      const torch::Tensor target = batch.tokens.narrow(1, 1, args.seq);
      const torch::Tensor logits = model(input);
      const torch::Tensor per_window =
          torch::nn::functional::cross_entropy(
              logits.reshape({-1, gpt::kVocabulary}), target.reshape({-1}),
              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
              .view({input.size(0), args.seq})
              .mean(1);
      const torch::Tensor all = accelerator.gather_for_metrics(per_window);
      sum += all.to(torch::kDouble).sum().template item<double>();
      count += all.size(0);
    }
    evaluation_seconds += seconds() - began;
    return sum / static_cast<double>(count);
  };

  double logged_at = seconds(), logged_evaluation = 0, last_val = -1, train_seconds = 0;
  const std::int64_t started_at_step = step;
  torch::Tensor row_loss = torch::zeros({}), eval_loss = torch::zeros({});  // this rank's sums
  std::int64_t since_eval = 0;
  const double nats_to_bits = 1.0 / std::numbers::ln2;

  // The time the loop waits for its next batch: the loader's, and the periodic checkpoints' saves,
  // which the prepared loader takes between two batches (all of a blocking save; a background
  // save's snapshot, and its wait for the previous write). bench/async_checkpoint.sh reads it.
  double batch_wait_seconds = 0;
  struct AskedAt {  // when the body ends, whichever way it ends, the next batch is asked for
    double& at;
    const decltype(seconds)& now;
    ~AskedAt() { at = now(); }
  };
  // One epoch of either loader: its batches' input and target (a Window holds both in one
  // tensor, a TokenWindow apart), until the epoch or --steps ends.
  auto train_epoch = [&](auto& batches) {
    double asked_at = seconds();
    for (const auto& batch : batches) {
      batch_wait_seconds += seconds() - asked_at;
      const AskedAt ask_next{asked_at, seconds};
      examples::die_here_if_asked(accelerator.process_index(), step + 1);  // the kill test's
      torch::Tensor input, target;
      if constexpr (requires { batch.tokens; }) {
        input = batch.tokens.narrow(1, 0, args.seq);
        target = batch.tokens.narrow(1, 1, args.seq);
      } else {
        input = batch.input;
        target = batch.target;
      }
      const torch::Tensor logits = model(input);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(
          logits.reshape({-1, gpt::kVocabulary}), target.reshape({-1}));
      accelerator.backward(loss);
      double grad_norm = 0;
      if (accelerator.sync_gradients()) grad_norm = accelerator.clip_grad_norm(args.clip);
      const double lr = adamw.param_groups()[0].options().get_lr();  // this step's
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      row_loss += loss.detach() / args.accum;
      eval_loss += loss.detach() / args.accum;
      if (!accelerator.sync_gradients()) continue;
      ++step;
      ++since_eval;
      accel::tracking::Metrics shown{{"loss", loss.detach()}, {"lr", lr}};
      if (last_val >= 0) shown.emplace_back("val", last_val);  // the last validation loss
      progress.update(step, shown);
      if (args.tracking && (step % args.log_every == 0 || step == args.steps)) {
        // Every rank takes part in the mean; the main process writes the row. Tokens/s leaves
        // out the time spent evaluating.
        const std::int64_t steps_in_row =
            step % args.log_every == 0 ? args.log_every : step % args.log_every;
        const torch::Tensor mean_loss = accelerator.reduce(row_loss, accel::ReduceOp::mean) /
                                        static_cast<double>(steps_in_row);
        const double now = seconds();
        const double tokens_per_second =
            static_cast<double>(steps_in_row * tokens_per_step) /
            std::max(1e-9, now - logged_at - (evaluation_seconds - logged_evaluation));
        const double mfu = 6.0 * static_cast<double>(parameters) * tokens_per_second /
                           (peak_tflops * 1e12 * static_cast<double>(processes));
        accelerator.log({{"loss", mean_loss}, {"lr", lr}, {"grad_norm", grad_norm},
                         {"tokens_per_second", tokens_per_second}, {"mfu", mfu}},
                        step);
        logged_at = now;
        logged_evaluation = evaluation_seconds;
        row_loss.zero_();
      }
      if (args.eval_every > 0 && step % args.eval_every == 0 && step != args.steps) {
        const double train_loss =
            (accelerator.reduce(eval_loss, accel::ReduceOp::mean) / static_cast<double>(since_eval))
                .template item<double>();
        last_val = evaluate();
        progress.close();  // the bar's line ends; the next update draws a new one
        accelerator.print("step {}/{}: train loss {:.4f} | val loss {:.4f} nats/byte, {:.4f} "
                          "bits/byte | {:.0f} s",
                          step, args.steps, train_loss, last_val, last_val * nats_to_bits,
                          seconds());
        if (args.tracking)
          accelerator.log({{"val_loss", last_val}, {"val_bpb", last_val * nats_to_bits}}, step);
        eval_loss.zero_();
        since_eval = 0;
      }
      if (step == args.steps) break;
    }
  };
  while (step < args.steps) {
    if (stream_batches)
      train_epoch(*stream_batches);
    else
      train_epoch(*train_batches);
  }
  progress.close();
  train_seconds = seconds() - evaluation_seconds;
  if (profile) {
    const fs::path trace = profile->file();
    profile.reset();  // writes it
    accelerator.print("profile: {} (and one per other rank); the timeline: accel-plot {}",
                      trace.string(), accelerator.run_dir().string());
  }
  checkpoint();

  const double val_loss = evaluate();
  const double trained_steps = static_cast<double>(step - started_at_step);
  const double tokens_per_second =
      trained_steps * static_cast<double>(tokens_per_step) / std::max(1e-9, train_seconds);
  const double mfu = 6.0 * static_cast<double>(parameters) * tokens_per_second /
                     (peak_tflops * 1e12 * static_cast<double>(processes));
  accelerator.print("trained {} steps in {:.1f} s ({:.0f} tokens/s, MFU {:.2f}% of {:.3g} "
                    "TFLOP/s x {}), evaluated in {:.1f} s",
                    step - started_at_step, train_seconds, tokens_per_second, 100 * mfu,
                    peak_tflops, processes, evaluation_seconds);
  accelerator.print("waited {:.3f} s for batches (the periodic checkpoints' saves included)",
                    batch_wait_seconds);
  if constexpr (Strategy::precision_policy::loss_scaling)
    accelerator.print("loss_scale={} skipped_steps={}", accelerator.loss_scale(),
                      accelerator.skipped_steps());
  accelerator.print("val_loss={:.4f}", val_loss);
  accelerator.print("val_bpb={:.4f}", val_loss * nats_to_bits);
  {
    // Zero3 and Fsdp<FullShard> keep only shards between steps: every rank gathers them to read
    // the parameters whole.
    const auto full = accelerator.full_parameters(net);
    accelerator.print("param_digest={}", accel::state::parameter_digest_hex(*net));
  }
  if (args.tracking) {
    accelerator.log({{"val_loss", val_loss}, {"val_bpb", val_loss * nats_to_bits},
                     {"tokens_per_second", tokens_per_second}, {"mfu", mfu}},
                    step);
    accelerator.print("metrics in {} (charts: accel-plot {})",
                      accelerator.run_dir().string(),
                      accelerator.run_dir().parent_path().string());
    accelerator.end_training();
  }

  // A sample from the prepared model: under Zero3 each call gathers the units as a training
  // forward does, so every rank runs the same calls; rank 0's byte is the one every rank keeps.
  if (args.sample_tokens > 0) {
    torch::NoGradGuard no_grad;
    std::string context = args.prompt.empty() ? std::string("%\n") : args.prompt;
    std::string sample;
    std::uint64_t state = args.seed;
    for (std::int64_t i = 0; i < args.sample_tokens; ++i) {
      const auto length = static_cast<std::int64_t>(std::min<std::size_t>(
          context.size(), static_cast<std::size_t>(args.seq)));
      // --sequence-parallel splits the positions across the group: zeros after the context
      // make a multiple of --tp, which the causal mask keeps the context's logits from seeing.
      const std::int64_t parts = args.sequence_parallel ? args.tp : 1;
      const std::int64_t padded = (length + parts - 1) / parts * parts;
      std::vector<std::int64_t> bytes(static_cast<std::size_t>(padded), 0);
      for (std::int64_t j = 0; j < length; ++j)
        bytes[static_cast<std::size_t>(j)] =
            static_cast<unsigned char>(context[context.size() - static_cast<std::size_t>(length - j)]);
      const torch::Tensor input = torch::tensor(bytes, torch::kLong).view({1, padded});
      const torch::Tensor logits = model(accelerator.to_device(input));
      int byte = gpt::sample_byte(logits[0][length - 1], args.temperature, args.top_k, state);
      if (processes > 1)
        byte = accelerator.broadcast(accelerator.to_device(torch::full({1}, byte, torch::kLong)))
                   .template item<int>();
      context += static_cast<char>(byte);
      sample += static_cast<char>(byte);
    }
    accelerator.print("sample ({} bytes, temperature {}, top-k {}, seed {}):\n{}{}",
                      args.sample_tokens, args.temperature, args.top_k, args.seed,
                      printable(args.prompt), printable(sample));
  }
  return 0;
}

// CPU threads: --threads, else OMP_NUM_THREADS (accel::launch sets it to cores / processes for
// each worker it starts, as torchrun does), else one. One, because this model's operations are
// --keep-global-batch W: the accumulation that makes this run's global batch that of W processes
// with --accum, from the processes the launcher started (WORLD_SIZE; 1 without a launcher). The
// same command line then serves every start of an elastic job (accel-launch --nnodes MIN:MAX).
int accumulation_for_world(const Args& args) {
  if (!args.keep_global_batch) return args.accum;
  const int intended = *args.keep_global_batch;
  const char* world = std::getenv("WORLD_SIZE");
  const int processes = world != nullptr && *world != '\0' ? std::max(1, std::atoi(world)) : 1;
  const std::int64_t micro_batches = std::int64_t{intended} * args.accum;
  if (micro_batches % processes != 0)
    throw FlagConflict(fmt::format(
        "accel: --keep-global-batch {} with --accum {} makes {} micro-batch{} per optimizer step, "
        "which {} processes cannot share evenly; run on a number of processes that divides {}, "
        "or leave out --keep-global-batch to go on with another global batch",
        intended, args.accum, micro_batches, micro_batches == 1 ? "" : "es", processes,
        micro_batches));
  const auto accum = static_cast<int>(micro_batches / processes);
  const auto compiled = examples::accumulation_values();
  if (std::find(compiled.begin(), compiled.end(), accum) == compiled.end())
    throw FlagConflict(fmt::format(
        "accel: --keep-global-batch {} with --accum {} needs --accum {} on {} process{}, and this "
        "build compiled {} only; run on more processes, or build the examples with "
        "-DACCEL_ALL_VARIANTS=ON",
        intended, args.accum, accum, processes, processes == 1 ? "" : "es",
        examples::joined(compiled)));
  return accum;
}

// small: more threads made a step slower on the development machine, each small parallel
// operation waiting for a descheduled thread (measured in docs/gpt.md, "Training", under
// "Threads"). OpenBLAS, which computes Debian libtorch's matrix products, keeps a pool
// of its own that torch::set_num_threads does not limit (docs/reference/accelerator.md), so it gets the same
// number through openblas_set_num_threads, looked up at run time (another BLAS skips this).
int set_threads(std::optional<int> requested) {
  int threads = 1;
  if (requested) {
    threads = *requested;
  } else if (const char* set = std::getenv("OMP_NUM_THREADS"); set != nullptr && *set != '\0') {
    threads = std::max(1, std::atoi(set));
  }
  torch::set_num_threads(threads);
  if (void* symbol = dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) {
    void (*set_blas_threads)(int) = nullptr;
    std::memcpy(&set_blas_threads, &symbol, sizeof symbol);
    set_blas_threads(threads);
  }
  return threads;
}

}  // namespace

int run(int argc, char** argv) {
  try {
    Args args = parse(argc, argv);
    if (args.help) {
      fmt::print("{}", usage_text());
      return 0;
    }
    args.accum = accumulation_for_world(args);
    set_threads(args.threads);
    // Read and checked before anything is created: a missing or empty text stops here.
    const gpt::Corpus corpus = args.stream ? gpt::load_stream_corpus(*args.stream, args.seq)
                                           : gpt::load_corpus(args.text, args.seq + 1);
    int status = 0;
    // The 64 Accelerator types are in common/variants.hpp, shared with Fashion-MNIST; those of
    // --tp above.
    auto train_with = [&]<class Strategy>(std::type_identity<Strategy>) {
      status = train<Strategy>(args, corpus);
    };
    if (args.tp > 1)
      TensorParallelMatrix::run(
          tensor_parallel_variant(args.strategy, args.tp, args.precision, args.accum), train_with);
    else
      examples::run_variant(args.strategy, args.precision, args.accum, train_with);
    return status;
  } catch (const FlagConflict& error) {
    fmt::print(stderr, "gpt: {}\n", error.what());
    return 2;
  } catch (const BadArgument& error) {
    fmt::print(stderr, "gpt: {}\n{}", error.what(), usage_text());
    return 2;
  } catch (const gpt::DataError& error) {
    fmt::print(stderr, "gpt: {}\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    fmt::print(stderr, "gpt: {}\n", error.what());
    return 1;
  }
}

// `gpt --nproc 2 ...` starts two ranks; under accel-launch, torchrun, srun or mpirun the same
// binary just trains.
int main(int argc, char** argv) { return accel::launch(argc, argv, run); }
