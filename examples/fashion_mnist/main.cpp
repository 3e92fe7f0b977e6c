// Fashion-MNIST with accel: a plain libtorch training loop plus a handful of accel lines.
// The strategy is a type alias; the binary carries several so that one build can try each:
//   fashion_mnist --strategy zero3 --precision bf16 --accum 4
//   fashion_mnist --nproc 2 --strategy ddp
#include <accel/accelerator.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

namespace fs = std::filesystem;

namespace {

struct Args {
  std::string strategy = "ddp";
  std::string precision = "fp32";
  int accum = 1;
  int epochs = 3;
  std::int64_t steps = 0;  // total optimizer steps; 0: run every epoch
  std::int64_t batch_size = 64;
  double lr = 1e-3;
  std::int64_t eval_samples = 0;  // 0: the whole test set
  std::uint64_t seed = 42;
  std::string data_dir;
};

[[noreturn]] void usage(const std::string& error) {
  fmt::print(stderr,
             "fashion_mnist: {}\n"
             "usage: fashion_mnist [--nproc N] [--strategy ddp|zero2|zero3|fsdp]\n"
             "                     [--precision fp32|bf16|fp16|fp8]\n"
             "                     [--accum 1|2|4|8] [--epochs N] [--steps N] [--batch-size N]\n"
             "                     [--lr X] [--eval-samples N] [--seed N] [--data-dir DIR]\n",
             error);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) usage(fmt::format("{} needs a value", flag));
    const std::string value = argv[++i];
    try {
      if (flag == "--strategy") args.strategy = value;
      else if (flag == "--precision") args.precision = value;
      else if (flag == "--accum") args.accum = std::stoi(value);
      else if (flag == "--epochs") args.epochs = std::stoi(value);
      else if (flag == "--steps") args.steps = std::stoll(value);
      else if (flag == "--batch-size") args.batch_size = std::stoll(value);
      else if (flag == "--lr") args.lr = std::stod(value);
      else if (flag == "--eval-samples") args.eval_samples = std::stoll(value);
      else if (flag == "--seed") args.seed = std::stoull(value);
      else if (flag == "--data-dir") args.data_dir = value;
      else usage(fmt::format("unknown flag {}", flag));
    } catch (const std::logic_error&) {
      usage(fmt::format("{} {}: not a number", flag, value));
    }
  }
  return args;
}

// --- Data: the Debian package's IDX files, gunzipped once into a cache folder ----------------------

constexpr const char* kPackagedData = "/usr/share/datasets/fashion-mnist";
constexpr const char* kFiles[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                  "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

fs::path default_data_dir() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path base = cache && *cache ? fs::path(cache) : fs::path(home ? home : "/tmp") / ".cache";
  return base / "accel" / "fashion-mnist";
}

void ensure_unpacked(const fs::path& dir) {
  fs::create_directories(dir);
  for (const char* name : kFiles) {
    const fs::path target = dir / name;
    if (fs::exists(target)) continue;
    const fs::path source = fs::path(kPackagedData) / (std::string(name) + ".gz");
    if (!fs::exists(source))
      throw std::runtime_error(fmt::format(
          "{} is missing: install the Debian package dataset-fashion-mnist "
          "(scripts/setup-debian.sh does), or pass --data-dir with the unpacked IDX files",
          source.string()));
    // Unpack beside the target, then rename: a concurrent or interrupted run never sees half a file.
    const fs::path partial = dir / (std::string(name) + ".partial." + std::to_string(getpid()));
    const std::string command =
        fmt::format("gzip -dc '{}' > '{}'", source.string(), partial.string());
    if (std::system(command.c_str()) != 0)
      throw std::runtime_error(fmt::format("could not unpack {} ({})", source.string(), command));
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
    images = ((raw.images() - 0.2860) / 0.3530).flatten(1);
    labels = raw.targets();
    if (limit > 0 && limit < images.size(0)) {
      images = images.narrow(0, 0, limit);
      labels = labels.narrow(0, 0, limit);
    }
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
  Strategy accelerator({.seed = args.seed});

  Classifier net;
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(args.lr));
  accel::DataLoader train_data(FashionMnist(data_dir, /*train=*/true),
                               {.batch_size = args.batch_size, .shuffle = true, .seed = args.seed});
  accel::DataLoader test_data(FashionMnist(data_dir, /*train=*/false, args.eval_samples),
                              {.batch_size = 1000});
  auto [model, optimizer, train_batches, test_batches] =
      accelerator.prepare(net, adam, train_data, test_data);

  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const std::int64_t steps_per_epoch = (train_batches.size() + args.accum - 1) / args.accum;
  const std::int64_t total_steps =
      args.steps > 0 ? args.steps : steps_per_epoch * static_cast<std::int64_t>(args.epochs);
  std::int64_t step = 0;
  accelerator.print("training {} steps: {} x {} x {}, batch {}, {} process(es) on {}", total_steps,
                    Strategy::parallelism_policy::name, Strategy::precision_policy::name,
                    Strategy::accumulation_steps, args.batch_size, accelerator.num_processes(),
                    accelerator.device().str());

  for (int epoch = 0; step < total_steps; ++epoch) {
    for (const auto& batch : train_batches) {
      auto loss = torch::nn::functional::cross_entropy(model(batch.pixels), batch.label);
      accelerator.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
      if (!accelerator.sync_gradients()) continue;
      if (++step % 200 == 0 || step == total_steps)
        accelerator.print("epoch {} step {}/{} loss {:.4f} ({:.1f} s)", epoch, step, total_steps,
                          loss.template item<float>(), seconds());
      if (step == total_steps) break;
    }
  }

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
  accelerator.print("test_accuracy={:.4f}", static_cast<double>(correct) / static_cast<double>(seen));
  accelerator.print("param_digest={}", accel::state::parameter_digest_hex(*net));
  return 0;
}

// --- The variants compiled into this binary ------------------------------------------------------

template <class T> struct Named;
template <> struct Named<accel::Ddp> { static constexpr std::string_view flag = "ddp"; };
template <> struct Named<accel::Zero2> { static constexpr std::string_view flag = "zero2"; };
template <> struct Named<accel::Zero3> { static constexpr std::string_view flag = "zero3"; };
template <> struct Named<accel::Fsdp<accel::FullShard>> { static constexpr std::string_view flag = "fsdp"; };
template <> struct Named<accel::Fp32> { static constexpr std::string_view flag = "fp32"; };
template <> struct Named<accel::Bf16> { static constexpr std::string_view flag = "bf16"; };
template <> struct Named<accel::Fp16> { static constexpr std::string_view flag = "fp16"; };
template <> struct Named<accel::Fp8> { static constexpr std::string_view flag = "fp8"; };

using Parallelisms = std::tuple<accel::Ddp, accel::Zero2, accel::Zero3, accel::Fsdp<accel::FullShard>>;
using Precisions = std::tuple<accel::Fp32, accel::Bf16, accel::Fp16, accel::Fp8>;
using Accumulations = std::integer_sequence<int, 1, 2, 4, 8>;

// Runs train<Accelerator<Par, Prec, GradAccum<N>>> for the one combination the flags name.
template <class Fn>
bool run_variant(const Args& args, Fn&& run) {
  bool found = false;
  auto for_each_type = []<class Tuple>(std::type_identity<Tuple>, auto&& visit) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (visit(std::type_identity<std::tuple_element_t<I, Tuple>>{}), ...);
    }(std::make_index_sequence<std::tuple_size_v<Tuple>>{});
  };
  for_each_type(std::type_identity<Parallelisms>{}, [&]<class Par>(std::type_identity<Par>) {
    if (Named<Par>::flag != args.strategy) return;
    for_each_type(std::type_identity<Precisions>{}, [&]<class Prec>(std::type_identity<Prec>) {
      if (Named<Prec>::flag != args.precision) return;
      [&]<int... N>(std::integer_sequence<int, N...>) {
        ((N == args.accum ? (run(std::type_identity<accel::Accelerator<Par, Prec, accel::GradAccum<N>>>{}),
                             found = true)
                          : false),
         ...);
      }(Accumulations{});
    });
  });
  return found;
}

}  // namespace

int run(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    const fs::path data_dir = args.data_dir.empty() ? default_data_dir() : fs::path(args.data_dir);
    ensure_unpacked(data_dir);
    int status = 0;
    const bool found = run_variant(args, [&]<class Strategy>(std::type_identity<Strategy>) {
      status = train<Strategy>(args, data_dir);
    });
    if (!found)
      usage(fmt::format("no variant {} x {} x accum {} is compiled into this binary", args.strategy,
                        args.precision, args.accum));
    return status;
  } catch (const std::exception& error) {
    fmt::print(stderr, "fashion_mnist: {}\n", error.what());
    return 1;
  }
}

// `fashion_mnist --nproc 2 ...` starts two ranks; under accel-launch, torchrun, srun or mpirun
// the same binary just trains.
int main(int argc, char** argv) { return accel::launch(argc, argv, run); }
