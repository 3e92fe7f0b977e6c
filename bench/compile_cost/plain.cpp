// The plain side of bench/compile_cost.sh: accel.cpp's program in plain libtorch, as one process
// writes it without accel: torch::data for the shuffled batches, autocast to bfloat16 and
// gradient accumulation over 4 batches by hand. Keep the two equivalent.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>

namespace {

struct Synthetic : torch::data::datasets::Dataset<Synthetic> {
  torch::Tensor features = torch::randn({4096, 784});
  torch::Tensor labels = torch::randint(10, {4096});
  torch::data::Example<> get(std::size_t i) override {
    const auto index = static_cast<std::int64_t>(i);
    return {features[index], labels[index]};
  }
  torch::optional<std::size_t> size() const override {
    return static_cast<std::size_t>(features.size(0));
  }
};

struct ClassifierImpl : torch::nn::Module {
  torch::nn::Sequential layers;
  ClassifierImpl()
      : layers(register_module(
            "layers", torch::nn::Sequential(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                                            torch::nn::Linear(256, 10)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return layers->forward(x); }
};
TORCH_MODULE(Classifier);

constexpr int kAccumulation = 4;

}  // namespace

int main() {
  torch::manual_seed(0);
  Classifier net;
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
  auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      Synthetic{}.map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(64));

  at::autocast::set_cpu_enabled(true);
  at::autocast::set_autocast_cpu_dtype(torch::kBFloat16);
  std::int64_t micro_step = 0;
  for (const auto& batch : *loader) {
    auto loss = torch::nn::functional::cross_entropy(net(batch.data), batch.target);
    (loss / kAccumulation).backward();
    if (++micro_step % kAccumulation != 0) continue;
    adam.step();
    adam.zero_grad();
  }
  at::autocast::set_cpu_enabled(false);
}
