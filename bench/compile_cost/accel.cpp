// The accel side of bench/compile_cost.sh: one variant TU as a user writes it. plain.cpp is the
// same program in plain libtorch; keep the two equivalent (model, data, optimizer, loop).
#ifdef COMPILE_COST_LEAN
// The alias's own headers only (accel_lean.cpp; docs/getting-started.md, "Compile time").
#include <accel/accelerator_class.hpp>
#include <accel/precision/bf16.hpp>
#else
#include <accel/accelerator.hpp>
#endif

#include <cstdint>

namespace {

struct Sample {
  torch::Tensor features;
  torch::Tensor label;
};

struct Synthetic {
  torch::Tensor features = torch::randn({4096, 784});
  torch::Tensor labels = torch::randint(10, {4096});
  std::int64_t size() const { return features.size(0); }
  Sample get(std::int64_t i) const { return {features[i], labels[i]}; }
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

}  // namespace

int main() {
  accel::Accelerator<accel::Ddp, accel::Bf16, accel::GradAccum<4>> accelerator({.seed = 0});
  Classifier net;
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
  accel::DataLoader loader(Synthetic{}, {.batch_size = 64, .shuffle = true});
  auto [model, optimizer, batches] = accelerator.prepare(net, adam, loader);

  for (const auto& batch : batches) {
    auto loss = torch::nn::functional::cross_entropy(model(batch.features), batch.label);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
  }
}
