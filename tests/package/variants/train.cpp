// A user's training program, written once for every variant accel_add_variants() builds it as:
// one include, the variant's alias, a few steps, the safetensors writer, and a tracker of its own.
#include <accel/accelerator.hpp>
#include <accel/state/weights.hpp>  // nlohmann/json and the safetensors writer through the package

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

using Variants = accel::Variants<ACCEL_VARIANTS>;

// What a program writes to be a tracker (accel/tracking/tracker_contract.hpp): it keeps what it
// is given, to be checked below.
struct KeepingTracker {
  std::string project;
  std::vector<std::string> config;
  std::vector<std::string> received;
  bool finished = false;

  std::string name() const { return "keeping"; }
  void start(const accel::tracking::RunStart& run) {
    project = run.project;
    for (const auto& [key, value] : run.config) config.push_back(key + "=" + value.to_json());
  }
  void log(const accel::tracking::Scalars& values, std::int64_t step, double /*seconds*/) {
    for (const auto& [name, value] : values)
      received.push_back(fmt::format("{}@{}={}", name, step, value.value));
  }
  void log_text(const accel::tracking::Texts& values, std::int64_t step, double /*seconds*/) {
    for (const auto& [name, text] : values)
      received.push_back(fmt::format("{}@{}={}", name, step, text));
  }
  void finish() { finished = true; }
};

template <class Strategy>
int train() {
  Strategy accelerator({.seed = 3});
  torch::nn::Linear net(4, 1);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const torch::Tensor x = torch::ones({8, 4}), y = torch::zeros({8, 1});
  for (int step = 0; step < 4; ++step) {
    accelerator.backward(torch::mse_loss(model(x), y));
    optimizer.step();
    optimizer.zero_grad();
  }
  const auto bytes = accel::state::safetensors::serialize({{"weight", net->weight}});
  if (!torch::equal(accel::state::safetensors::File::from_bytes(bytes, "train").tensor("weight"),
                    net->weight))
    return 1;

  auto mine = std::make_shared<KeepingTracker>();
  const auto logs = std::filesystem::temp_directory_path() /
                    fmt::format("accel-variants-{}", static_cast<long>(::getpid()));
  accelerator.init_trackers("train", {{"lr", 0.1}},
                            {.log_dir = logs, .trackers = {accel::tracking::make_tracker(mine)}});
  accelerator.log({{"loss", 0.5}}, 1);
  accelerator.log_text({{"note", "hello"}}, 2);
  accelerator.end_training();
  std::filesystem::remove_all(logs);
  if (mine->project != "train" || mine->config != std::vector<std::string>{"lr=0.1"} ||
      mine->received != std::vector<std::string>{"loss@1=0.5", "note@2=hello"} || !mine->finished)
    return 3;
  fmt::print("variant {} of {} trained, accel {}\n", accel::variant_name<Strategy>(),
             Variants::names().size(), ACCEL_VERSION);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return Variants::run(accel::requested_variant(argc, argv),
                         []<class Strategy>(std::type_identity<Strategy>) { return train<Strategy>(); });
  } catch (const accel::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
}
