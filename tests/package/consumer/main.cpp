// A user's program: one include, one alias, one training step, and a tracker of its own.
#include <accel/accelerator.hpp>
#include <accel/state/weights.hpp>  // nlohmann/json and the safetensors writer through accel::accel

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

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

int main() {
  accel::Accelerator<accel::Ddp, accel::Fp32> accelerator;
  torch::nn::Linear net(4, 1);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  accelerator.backward(model(torch::ones({2, 4})).sum());
  optimizer.step();
  const auto bytes = accel::state::safetensors::serialize({{"weight", net->weight}});
  if (!torch::equal(accel::state::safetensors::File::from_bytes(bytes, "consumer").tensor("weight"),
                    net->weight))
    return 1;

  auto mine = std::make_shared<KeepingTracker>();
  const auto logs = std::filesystem::temp_directory_path() /
                    fmt::format("accel-consumer-{}", static_cast<long>(::getpid()));
  accelerator.init_trackers("consumer", {{"lr", 0.1}},
                            {.log_dir = logs, .trackers = {accel::tracking::make_tracker(mine)}});
  accelerator.log({{"loss", 0.5}}, 1);
  accelerator.log_text({{"note", "hello"}}, 2);
  accelerator.end_training();
  std::filesystem::remove_all(logs);
  if (mine->project != "consumer" || mine->config != std::vector<std::string>{"lr=0.1"} ||
      mine->received != std::vector<std::string>{"loss@1=0.5", "note@2=hello"} || !mine->finished)
    return 2;
  fmt::print("consumer ok, accel {}\n", ACCEL_VERSION);
}
