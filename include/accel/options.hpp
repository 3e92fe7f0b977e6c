// Run-time knobs of an Accelerator, as one aggregate meant for designated initializers:
//   accel::Accelerator<accel::Ddp> acc({.seed = 42});
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>

namespace accel {

struct Options {
  // Where the model and batches go. Default: cuda:<local rank> when CUDA is available, else CPU.
  std::optional<torch::Device> device = std::nullopt;
  // When set, the constructor calls set_seed(*seed) before anything else.
  std::optional<std::uint64_t> seed = std::nullopt;
  // Batch copies to the device overlap compute (pinned memory is the user's choice).
  bool non_blocking = false;
};

}  // namespace accel
