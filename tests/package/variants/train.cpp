// A training program written once for every variant accel_add_variants() builds it as.
#include <accel/accelerator.hpp>

#include <cstdio>
#include <type_traits>

using Variants = accel::Variants<ACCEL_VARIANTS>;

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
  std::printf("variant %s of %zu trained\n", accel::variant_name<Strategy>().c_str(),
              Variants::names().size());
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
