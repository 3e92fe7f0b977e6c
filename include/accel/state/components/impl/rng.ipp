// The generators a checkpoint saves; rng.hpp includes it in header-only mode.
#pragma once

#include <ATen/CPUGeneratorImpl.h>

#include "../rng.hpp"

namespace accel::state::components::detail {

ACCEL_DECL std::vector<torch::Generator> generators() {
  std::vector<torch::Generator> all{at::detail::getDefaultCPUGenerator()};
  if (torch::cuda::is_available())
    for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i)
      all.push_back(at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, i)));
  return all;
}

}  // namespace accel::state::components::detail
