// Fashion-MNIST with accel: a plain libtorch training loop plus a handful of accel lines.
// The strategy is a type alias; the binary carries several so that one build can try each:
//   fashion_mnist --strategy zero3 --precision bf16 --accum 2
//   fashion_mnist --nproc 2 --strategy ddp
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
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
#include "common/variants.hpp"

namespace fs = std::filesystem;

namespace {

// --- The command line ----------------------------------------------------------------------------

// The readers and the flags both examples share (common/command_line.hpp).
using examples::BadArgument;
using examples::whole_number;

// Ends the program with status 2, as a usage error (BadArgument) does, before any training starts.
struct BadData : std::runtime_error { using std::runtime_error::runtime_error; };

constexpr std::int64_t kTrainSize = 60000, kTestSize = 10000;
constexpr int kMaxWorkers = 64;

struct Args {
  std::string strategy = "ddp";
  std::string precision = "fp32";
  int accum = 1;
  int epochs = 3;
  std::optional<std::int64_t> steps;  // total optimizer steps; unset: run every epoch
  std::int64_t batch_size = 64;
  double lr = 1e-3;
  std::int64_t eval_samples = 0;  // 0: the whole test set
  std::uint64_t seed = 42;
  // Loader threads that build batches while the step runs (LoaderOptions::num_workers). One is
  // enough here: a sample is a row of a tensor in memory, and on a small machine more threads
  // would only compete with the step (and with the other processes under --nproc).
  int workers = 1;
  std::optional<fs::path> data_dir;  // unset: the cache folder, filled from the Debian package
  bool tracking = false;             // metrics to <log dir>/fashion_mnist/<run>/ (accel-plot)
  std::optional<fs::path> log_dir;   // unset: ACCEL_LOG_DIR, else ./runs
  std::string run_name;              // empty: the UTC start time
  // the writers: --log-with jsonl,csv,tensorboard or all
  std::vector<accel::tracking::Backend> log_with = {accel::tracking::Backend::jsonl,
                                                    accel::tracking::Backend::csv};
  std::int64_t log_every = 10;       // optimizer steps between two rows of metrics
  bool progress = true;
  std::optional<fs::path> checkpoint_dir;  // checkpoints as checkpoint_<n> under it
  std::int64_t checkpoint_every = 0;       // optimizer steps between checkpoints; 0: at the end
  bool async_checkpoint = false;           // those saves written in the background
  bool resume = false;                     // from the newest checkpoint under checkpoint_dir
  bool help = false;
};

std::string usage_text() {
  return fmt::format(
      "usage: fashion_mnist [flags]\n"
      "  --nproc N         worker processes on this machine (default 1, or ACCEL_NPROC)\n"
      "  --strategy S      {} (default ddp)\n"
      "  --precision P     {} (default fp32)\n"
      "  --accum N         micro-batches per optimizer step: {} (default 1)\n"
      "  --epochs N        passes over the training set, at least 1 (default 3)\n"
      "  --steps N         optimizer steps in all, at least 1; given, it replaces --epochs\n"
      "  --batch-size N    samples per micro-batch, 1 to {} (default 64)\n"
      "  --lr X            Adam's learning rate, above 0 (default 1e-3)\n"
      "  --eval-samples N  test images to evaluate, 0 to {}; 0: all of them (default 0)\n"
      "  --seed N          0 to {} (default 42)\n"
      "  --workers N       loader threads that build batches ahead of the step, 0 to {}; 0: on\n"
      "                    the training thread (default 1)\n"
      "  --data-dir DIR    read the four unpacked IDX files from DIR, which is never written;\n"
      "                    without it they are unpacked once from the Debian package into\n"
      "                    $XDG_CACHE_HOME/accel/fashion-mnist (or ~/.cache/accel/fashion-mnist)\n"
      "  --with-tracking   log loss, learning rate and samples/s to a run folder for accel-plot\n"
      "  --log-dir DIR     the folder of runs, implies --with-tracking (default: ACCEL_LOG_DIR,\n"
      "                    else ./runs)\n"
      "  --run-name NAME   the run's folder name, implies --with-tracking (default: the UTC\n"
      "                    start time)\n"
      "  --log-with LIST   the trackers, implies --with-tracking: a comma list of jsonl,\n"
      "                    csv and tensorboard (TensorBoard's event file), or all (default:\n"
      "                    jsonl,csv)\n"
      "  --log-every N     optimizer steps between two logged rows, at least 1 (default 10)\n"
      "  --no-progress     no progress bar or progress lines\n"
      "  --checkpoint-dir DIR  save_state() into DIR/checkpoint_<n> every --checkpoint-every\n"
      "                    steps and at the end\n"
      "  --checkpoint-every N  optimizer steps between checkpoints, at least 1 (default: only at\n"
      "                    the end)\n"
      "  --async-checkpoint  write those checkpoints in the background: the loop waits only\n"
      "                    for a copy of the state in memory (docs/how-to/fault-tolerance.md)\n"
      "  --resume          continue from the newest checkpoint of this run in --checkpoint-dir\n"
      "                    when it holds one, start afresh when it holds none (one command line\n"
      "                    for the first start and every restart); --steps stays the run's total\n",
      examples::joined(examples::strategy_flags()), examples::joined(examples::precision_flags()),
      examples::joined(examples::accumulation_values()), kTrainSize, kTestSize,
      std::numeric_limits<std::uint64_t>::max(), kMaxWorkers);
}

// accel::launch has already taken `--nproc N` out of argv (and refused a bad one with status 2).
Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&] { return examples::flag_value(argc, argv, i); };
    if (examples::shared_flag(args, flag, value)) continue;
    if (flag == "--epochs") args.epochs = whole_number(flag, value(), 1);
    else if (flag == "--steps") args.steps = whole_number<std::int64_t>(flag, value(), 1);
    else if (flag == "--batch-size")
      args.batch_size = whole_number<std::int64_t>(flag, value(), 1, kTrainSize);
    else if (flag == "--lr") args.lr = examples::real_number(flag, value(), "1e-3");
    else if (flag == "--eval-samples")
      args.eval_samples = whole_number<std::int64_t>(flag, value(), 0, kTestSize);
    else if (flag == "--seed") args.seed = whole_number<std::uint64_t>(flag, value(), 0);
    else if (flag == "--workers") args.workers = whole_number(flag, value(), 0, kMaxWorkers);
    else if (flag == "--data-dir") args.data_dir = fs::path(value());
    else throw BadArgument(fmt::format("unknown flag '{}'", flag));
  }
  examples::check_checkpoint_flags(args);
  return args;
}

// --- Data: Fashion-MNIST's four IDX files ---------------------------------------------------------
// The Debian package ships them gzipped. Without --data-dir they are gunzipped into a cache folder
// that is ours to fill and repair; a --data-dir belongs to the user and is only read. Every file
// is checked here before torch's MNIST reader opens it: that reader checks the header but reads a
// short file's missing pixels as whatever memory held, and its errors name no file.

constexpr const char* kPackagedData = "/usr/share/datasets/fashion-mnist";
constexpr std::uint32_t kImagesMagic = 2051;  // IDX: unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 2049;  // IDX: unsigned bytes, 1 dimension
constexpr std::uint32_t kSide = 28;
constexpr std::uint32_t kClasses = 10;

struct IdxFile {
  const char* name;
  std::uint32_t magic;
  std::uint32_t count;
};
constexpr IdxFile kFiles[] = {{"train-images-idx3-ubyte", kImagesMagic, kTrainSize},
                              {"train-labels-idx1-ubyte", kLabelsMagic, kTrainSize},
                              {"t10k-images-idx3-ubyte", kImagesMagic, kTestSize},
                              {"t10k-labels-idx1-ubyte", kLabelsMagic, kTestSize}};

// What is wrong with `path` as `file`, in words that follow its name; empty when nothing is.
std::string idx_problem(const fs::path& path, const IdxFile& file) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) return "is missing";
  if (!fs::is_regular_file(status)) return "is not a regular file";
  const std::uintmax_t size = fs::file_size(path, error);
  std::ifstream in(path, std::ios::binary);
  if (error || !in) return "cannot be read";
  const bool images = file.magic == kImagesMagic;
  const std::uintmax_t header = images ? 16 : 8;
  if (size < header)
    return fmt::format("is {} bytes, shorter than its {}-byte IDX header", size, header);
  auto big_endian = [&in] {  // IDX numbers are big-endian 32-bit
    unsigned char bytes[4] = {};
    in.read(reinterpret_cast<char*>(bytes), 4);
    return std::uint32_t{bytes[0]} << 24 | std::uint32_t{bytes[1]} << 16 |
           std::uint32_t{bytes[2]} << 8 | std::uint32_t{bytes[3]};
  };
  if (const std::uint32_t magic = big_endian(); magic != file.magic)
    return fmt::format("has magic number {}, not {} (IDX {}){}", magic, file.magic,
                       images ? "images" : "labels",
                       magic >> 16 == 0x1f8b ? ": it is still gzipped" : "");
  if (const std::uint32_t count = big_endian(); count != file.count)
    return fmt::format("holds {} items, not {}", count, file.count);
  if (images) {
    const std::uint32_t rows = big_endian(), columns = big_endian();
    if (rows != kSide || columns != kSide)
      return fmt::format("holds {}x{} images, not {}x{}", rows, columns, kSide, kSide);
  }
  const std::uintmax_t item = images ? kSide * kSide : 1;
  const std::uintmax_t expected = header + file.count * item;
  if (size != expected)
    return fmt::format("is {} bytes, not the {} its header gives ({} + {} x {}){}", size, expected,
                       header, file.count, item, size < expected ? ": it is truncated" : "");
  if (!images) {
    std::vector<unsigned char> labels(file.count);
    in.read(reinterpret_cast<char*>(labels.data()), static_cast<std::streamsize>(labels.size()));
    if (!in) return "cannot be read";
    const auto bad = std::find_if(labels.begin(), labels.end(),
                                  [](unsigned char label) { return label >= kClasses; });
    if (bad != labels.end())
      return fmt::format("holds label {} at item {}; labels are 0 to {}", *bad,
                         bad - labels.begin(), kClasses - 1);
  }
  return {};
}

// A folder the user named: checked, never written.
void check_data_dir(const fs::path& dir) {
  const std::string fix = fmt::format(
      "; give a --data-dir with the four IDX files unpacked (gzip -dc {}/NAME.gz > DIR/NAME), "
      "or leave it out to use the cache folder",
      kPackagedData);
  std::error_code error;
  if (!fs::exists(dir, error))
    throw BadData(fmt::format("--data-dir {} does not exist{}", dir.string(), fix));
  if (!fs::is_directory(dir, error))
    throw BadData(fmt::format("--data-dir {} is not a folder{}", dir.string(), fix));
  for (const IdxFile& file : kFiles)
    if (const std::string problem = idx_problem(dir / file.name, file); !problem.empty())
      throw BadData(fmt::format("{} {}{}", (dir / file.name).string(), problem, fix));
}

fs::path cache_dir() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path base = cache && *cache ? fs::path(cache) : fs::path(home ? home : "/tmp") / ".cache";
  return base / "accel" / "fashion-mnist";
}

std::string shell_quoted(const fs::path& path) {
  std::string quoted = "'";
  for (const char c : path.string())
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The cache folder, ours: a file there that is missing or fails the checks (truncated, or edited
// by hand) is unpacked again from the Debian package, with a note on stderr; the cache holds
// nothing of the user's to lose.
void fill_cache(const fs::path& dir) {
  fs::create_directories(dir);
  for (const IdxFile& file : kFiles) {
    const fs::path target = dir / file.name;
    const std::string problem = idx_problem(target, file);
    if (problem.empty()) continue;
    if (fs::exists(fs::symlink_status(target)))
      fmt::print(stderr, "fashion_mnist: {} {}; unpacking it again\n", target.string(), problem);
    const fs::path source = fs::path(kPackagedData) / (std::string(file.name) + ".gz");
    const std::string reinstall = "; (re)install the Debian package dataset-fashion-mnist "
                                  "(scripts/setup-debian.sh does), or pass --data-dir";
    if (!fs::exists(source))
      throw BadData(fmt::format("{} is missing{}", source.string(), reinstall));
    // Unpacked beside the target, checked, then renamed: no run, concurrent or interrupted,
    // finds a partial or damaged file under the real name.
    const fs::path partial = dir / fmt::format("{}.partial.{}", file.name, getpid());
    auto give_up = [&](const std::string& what) {
      std::error_code ignored;
      fs::remove(partial, ignored);
      throw BadData(fmt::format("{}{}", what, reinstall));
    };
    const std::string command =
        fmt::format("gzip -dc {} > {}", shell_quoted(source), shell_quoted(partial));
    if (std::system(command.c_str()) != 0)
      give_up(fmt::format("could not unpack {} ({} failed)", source.string(), command));
    if (const std::string damaged = idx_problem(partial, file); !damaged.empty())
      give_up(fmt::format("{} unpacks to a file that {}", source.string(), damaged));
    fs::rename(partial, target);
  }
}

struct Image {
  torch::Tensor pixels;  // 784 floats, normalised
  torch::Tensor label;   // int64 scalar
};

struct FashionMnist {
  torch::Tensor images, labels;
  FashionMnist(const fs::path& dir, bool train, std::int64_t limit = 0) {
    torch::data::datasets::MNIST raw(
        dir.string(), train ? torch::data::datasets::MNIST::Mode::kTrain
                            : torch::data::datasets::MNIST::Mode::kTest);
    images = raw.images();
    labels = raw.targets();
    if (limit > 0 && limit < images.size(0)) {
      images = images.narrow(0, 0, limit);
      labels = labels.narrow(0, 0, limit);
    }
    // In place, on the rows kept: the set is 188 MB of floats, and each copy costs its pages.
    images = images.sub_(0.2860).div_(0.3530).flatten(1);
  }
  std::int64_t size() const { return images.size(0); }
  Image get(std::int64_t i) const { return {images[i], labels[i]}; }
};

struct ClassifierImpl : torch::nn::Module {
  torch::nn::Sequential layers;
  ClassifierImpl()
      : layers(register_module(
            "layers", torch::nn::Sequential(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                                            torch::nn::Linear(256, 128), torch::nn::ReLU(),
                                            torch::nn::Linear(128, 10)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return layers->forward(x); }
};
TORCH_MODULE(Classifier);

// --- The training loop: what a user writes ----------------------------------------------------------

template <class Strategy>
int train(const Args& args, const fs::path& data_dir) {
  accel::Options options{.seed = args.seed};
  if (args.checkpoint_dir) options.checkpoints.directory = *args.checkpoint_dir;
  // Every --checkpoint-every steps accel saves where the loop stands between two batches (in the
  // background with --async-checkpoint); --resume loads the newest checkpoint of this run in
  // prepare(), when there is one.
  options.checkpoints.every_steps = args.checkpoint_every;
  options.checkpoints.async = args.async_checkpoint;
  options.checkpoints.resume = args.resume;
  Strategy accelerator(options);

  Classifier net;
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(args.lr));
  accel::DataLoader train_data(FashionMnist(data_dir, /*train=*/true),
                               {.batch_size = args.batch_size, .shuffle = true, .seed = args.seed,
                                .num_workers = args.workers});
  accel::DataLoader test_data(FashionMnist(data_dir, /*train=*/false, args.eval_samples),
                              {.batch_size = 1000, .num_workers = args.workers});
  auto [model, optimizer, train_batches, test_batches] =
      accelerator.prepare(net, adam, train_data, test_data);

  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const std::int64_t steps_per_epoch = (train_batches.size() + args.accum - 1) / args.accum;
  const std::int64_t total_steps =
      args.steps ? *args.steps : steps_per_epoch * static_cast<std::int64_t>(args.epochs);
  // Resuming brought back the model, Adam's state, both loaders' positions, the RNG and the step
  // count: the run continues exactly where the checkpoint was taken.
  if (const auto& resumed = accelerator.resumed_from())
    accelerator.print("resumed from {} at step {}", resumed->string(),
                      accelerator.completed_steps());
  std::int64_t step = accelerator.completed_steps();
  auto checkpoint = [&] {
    if (args.checkpoint_dir)
      accelerator.print("saved {}", accelerator.save_state().string());
  };
  accelerator.print("training {} steps: {} x {} x {}, batch {}, {} process(es) on {}", total_steps,
                    Strategy::parallelism_policy::name, Strategy::precision_policy::name,
                    Strategy::accumulation_steps, args.batch_size, accelerator.num_processes(),
                    accelerator.device().str());

  // Samples in one optimizer step, over every process.
  const std::int64_t global_batch =
      args.batch_size * args.accum * static_cast<std::int64_t>(accelerator.num_processes());
  if (args.tracking)
    accelerator.init_trackers(
        "fashion_mnist",
        {{"strategy", args.strategy}, {"precision", args.precision}, {"accum", args.accum},
         {"batch_size", args.batch_size}, {"global_batch", global_batch}, {"lr", args.lr},
         {"seed", args.seed}, {"steps", total_steps}, {"processes", accelerator.num_processes()}},
        {.log_dir = args.log_dir.value_or(fs::path()),
         .run_name = args.run_name,
         .backends = args.log_with});
  accel::Progress progress(accelerator, total_steps,
                           {.mode = args.progress ? accel::ProgressMode::automatic
                                                  : accel::ProgressMode::off,
                            .samples_per_step = global_batch});
  double logged_at = seconds();
  torch::Tensor loss_sum = torch::zeros({});  // this rank's losses since the last logged row

  for (int epoch = 0; step < total_steps; ++epoch) {
    for (const auto& batch : train_batches) {
      auto loss = torch::nn::functional::cross_entropy(model(batch.pixels), batch.label);
      accelerator.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
      if (args.tracking) loss_sum += loss.detach() / args.accum;
      if (!accelerator.sync_gradients()) continue;
      ++step;
      progress.update(step, {{"loss", loss.detach()}, {"epoch", epoch}});
      if (args.tracking && (step % args.log_every == 0 || step == total_steps)) {
        // Every rank takes part in the mean; the main process writes the row.
        const std::int64_t steps_in_row = step % args.log_every == 0 ? args.log_every
                                                                     : step % args.log_every;
        const torch::Tensor mean_loss =
            accelerator.reduce(loss_sum, accel::ReduceOp::mean) / static_cast<double>(steps_in_row);
        const double now = seconds();
        accelerator.log({{"loss", mean_loss},
                         {"lr", adam.param_groups()[0].options().get_lr()},
                         {"samples_per_second",
                          static_cast<double>(steps_in_row * global_batch) / (now - logged_at)},
                         {"epoch", epoch}},
                        step);
        logged_at = now;
        loss_sum.zero_();
      }
      if (step == total_steps) break;
    }
  }
  progress.close();
  checkpoint();

  torch::NoGradGuard no_grad;
  net->eval();
  std::int64_t correct = 0, seen = 0;
  for (const auto& batch : test_batches) {
    // Every rank's predictions, each test image counted once.
    const auto [predicted, label] =
        accelerator.gather_for_metrics(std::tuple{model(batch.pixels).argmax(1), batch.label});
    correct += predicted.eq(label).sum().template item<std::int64_t>();
    seen += label.size(0);
  }
  accelerator.print("trained in {:.1f} s", seconds());
  // Fp16's loss scaler: where the scale ended and how many steps it skipped on inf/nan.
  if constexpr (Strategy::precision_policy::loss_scaling)
    accelerator.print("loss_scale={} skipped_steps={}", accelerator.loss_scale(),
                      accelerator.skipped_steps());
  accelerator.print("test_accuracy={:.4f}", static_cast<double>(correct) / static_cast<double>(seen));
  // Zero3 and Fsdp<FullShard> keep only shards between steps: every rank gathers them to read
  // the parameters whole.
  const auto full = accelerator.full_parameters(net);
  accelerator.print("param_digest={}", accel::state::parameter_digest_hex(*net));
  if (args.tracking) {
    accelerator.log({{"test_accuracy", static_cast<double>(correct) / static_cast<double>(seen)}},
                    step);
    accelerator.print("metrics in {} (charts: accel-plot {})",
                      accelerator.run_dir().string(),
                      accelerator.run_dir().parent_path().string());
    accelerator.end_training();
  }
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    if (args.help) {
      fmt::print("{}", usage_text());
      return 0;
    }
    fs::path data_dir;
    if (args.data_dir) {
      data_dir = *args.data_dir;
      check_data_dir(data_dir);
    } else {
      data_dir = cache_dir();
      fill_cache(data_dir);
    }
    int status = 0;
    // The 64 Accelerator types are in common/variants.hpp, shared with the GPT example.
    examples::run_variant(args.strategy, args.precision, args.accum,
                          [&]<class Strategy>(std::type_identity<Strategy>) {
                            status = train<Strategy>(args, data_dir);
                          });
    return status;
  } catch (const BadArgument& error) {
    fmt::print(stderr, "fashion_mnist: {}\n{}", error.what(), usage_text());
    return 2;
  } catch (const BadData& error) {
    fmt::print(stderr, "fashion_mnist: {}\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    fmt::print(stderr, "fashion_mnist: {}\n", error.what());
    return 1;
  }
}

// `fashion_mnist --nproc 2 ...` starts two ranks; under accel-launch, torchrun, srun or mpirun
// the same binary just trains.
int main(int argc, char** argv) { return accel::launch(argc, argv, run); }
