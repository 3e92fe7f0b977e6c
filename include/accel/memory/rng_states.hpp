// The random-number state a checkpointed segment's recompute must replay: the CPU generator and
// the CUDA generator of each device the segment's inputs are on (as torch.utils.checkpoint
// does), so that dropout draws the same mask in the backward's recompute as in the forward.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace accel::memory::detail {

class RngStates {
 public:
  RngStates() = default;

  // The states now, of the CPU generator and of the CUDA generators of `cuda_devices`.
  static RngStates capture(const std::vector<c10::DeviceIndex>& cuda_devices) {
    RngStates states;
    states.cpu_ = read(cpu());
    for (const auto index : cuda_devices)
      states.cuda_.emplace_back(index, read(cuda(index)));
    return states;
  }

  // Sets every generator captured to its captured state.
  void restore() const {
    write(cpu(), cpu_);
    for (const auto& [index, state] : cuda_) write(cuda(index), state);
  }

  // The same generators' states now (what a recompute must put back when it is done).
  RngStates now() const {
    RngStates states;
    states.cpu_ = read(cpu());
    for (const auto& [index, state] : cuda_) states.cuda_.emplace_back(index, read(cuda(index)));
    return states;
  }

 private:
  static at::Generator cpu() { return at::detail::getDefaultCPUGenerator(); }
  static at::Generator cuda(c10::DeviceIndex index) {
    return at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, index));
  }
  static torch::Tensor read(at::Generator generator) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
  }
  static void write(at::Generator generator, const torch::Tensor& state) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }

  torch::Tensor cpu_;
  std::vector<std::pair<c10::DeviceIndex, torch::Tensor>> cuda_;
};

// RAII for a recompute: the captured states in, and on leaving the scope the states from before
// it back, so the recompute consumes no random numbers of the training loop's stream.
class ReplayRng {
 public:
  explicit ReplayRng(const RngStates& captured) : before_(captured.now()) { captured.restore(); }
  ~ReplayRng() { before_.restore(); }
  ReplayRng(const ReplayRng&) = delete;
  ReplayRng& operator=(const ReplayRng&) = delete;

 private:
  RngStates before_;
};

}  // namespace accel::memory::detail
