// RAII: a model's full parameters for as long as the scope lives, through a strategy's
// gather_full / release_full (parallel/contract.hpp). Accelerator::full_parameters() hands one
// to the user; save_model (state/model_files.hpp) gathers with one before the main process
// writes.
#pragma once

#include <torch/torch.h>

namespace accel::parallel {

template <class Strategy>
class [[nodiscard]] FullParameters {
 public:
  FullParameters(Strategy& strategy, torch::nn::Module& module)
      : strategy_(strategy), module_(module) {
    strategy_.gather_full(module_);
  }
  ~FullParameters() { strategy_.release_full(module_); }
  FullParameters(const FullParameters&) = delete;
  FullParameters& operator=(const FullParameters&) = delete;

 private:
  Strategy& strategy_;
  torch::nn::Module& module_;
};

}  // namespace accel::parallel
