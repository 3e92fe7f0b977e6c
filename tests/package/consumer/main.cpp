// A user's program: one include, one alias, one training step.
#include <accel/accelerator.hpp>
#include <accel/state/weights.hpp>  // nlohmann/json and the safetensors writer through accel::accel

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
  fmt::print("consumer ok, accel {}\n", ACCEL_VERSION);
}
