// expect: accel: Zero2, Zero3 and Fsdp shard optimizer state by building the same optimizer type over each rank's shard
#include <accel/accelerator.hpp>

// An optimizer known only as torch::optim::Optimizer cannot be rebuilt over a shard: refused,
// even though the object behind it is an Adam.
int main() {
  accel::Accelerator<accel::Fsdp<accel::ShardGradOp>> accelerator;
  torch::nn::Linear net(2, 2);
  torch::optim::Adam adam(net->parameters());
#ifdef ACCEL_TWIN
  auto [model, optimizer] = accelerator.prepare(net, adam);
#else
  torch::optim::Optimizer& base = adam;
  auto [model, optimizer] = accelerator.prepare(net, base);
#endif
}
