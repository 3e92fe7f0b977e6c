// A training loop built from a copy of accel's include/ folder alone, with a plain compiler
// command line and no accel CMake (tests/package/run-copied.sh): three steps of Ddp on one
// process, which must lower the loss.
#include <accel/accelerator.hpp>

int main() {
  torch::manual_seed(0);
  accel::Accelerator<accel::Ddp, accel::Fp32> accelerator;
  torch::nn::Linear net(4, 1);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const torch::Tensor x = torch::randn({16, 4});
  const torch::Tensor y = x.sum(1, /*keepdim=*/true);
  double first = 0;
  double last = 0;
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor loss = torch::mse_loss(model(x), y);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    (step == 0 ? first : last) = loss.item<double>();
  }
  if (!(last < first)) {
    fmt::print(stderr, "copied: the loss went from {} to {} in 3 steps\n", first, last);
    return 1;
  }
  fmt::print("copied ok: loss {} -> {}, accel {}\n", first, last, ACCEL_VERSION);
}
