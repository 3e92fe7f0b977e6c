// Compiled as if libtorch had c10d's NCCL group (USE_C10D_NCCL, the CUDA toolkit's headers and
// libtorch's own CUDA headers), never linked nor run: on a CPU-only libtorch this is what checks
// that the NCCL side of runtime::ProcessGroup and the training paths that hand it CUDA tensors
// compile against this libtorch's c10d (1.13's ProcessGroup, 2.x's Backend). Whether they work
// is for a machine with a GPU (scripts/device-check.sh, docs/reference/libtorch-versions.md).
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>

static_assert(accel::runtime::has_nccl,
              "accel: this check is compiled with USE_C10D_NCCL; tests/CMakeLists.txt defines it");

namespace {

// One training step on CUDA per strategy: instantiates each strategy's collectives on the group.
template <class Strategy>
void train_on_cuda() {
  Strategy accelerator({.device = torch::Device(torch::kCUDA, 0)});
  auto net = torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 1));
  torch::optim::AdamW adamw(net->parameters(), 1e-3);
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  const auto x = torch::randn({2, 4}, torch::Device(torch::kCUDA, 0));
  accelerator.backward(model(x).sum());
  optimizer.step();
  optimizer.zero_grad();
  accelerator.wait_for_everyone();
}

// save_state(SaveMode::async) on CUDA: the snapshot's pinned buffers, filled on a copy stream
// (state/host_snapshot.hpp).
void save_async_on_cuda() {
  accel::Accelerator<accel::Ddp> accelerator({.device = torch::Device(torch::kCUDA, 0)});
  auto net = torch::nn::Linear(4, 8);
  torch::optim::AdamW adamw(net->parameters(), 1e-3);
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  accelerator.save_state(accel::SaveMode::async);
  accelerator.end_training();
}

}  // namespace

void nccl_wiring_instantiations() {
  save_async_on_cuda();
  train_on_cuda<accel::Accelerator<accel::Ddp, accel::Bf16>>();
  train_on_cuda<accel::Accelerator<accel::DdpWith<accel::CompressBf16>>>();
  train_on_cuda<accel::Accelerator<accel::Zero2, accel::Fp16>>();
  train_on_cuda<accel::Accelerator<accel::Zero3, accel::Bf16, accel::GradAccum<2>>>();
  train_on_cuda<accel::Accelerator<accel::Fsdp<accel::HybridShard>>>();
}
