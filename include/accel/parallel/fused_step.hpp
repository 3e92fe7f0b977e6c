// The optimizer step in one pass over memory (Options::fused_optimizer, on by default).
//
// libtorch's torch::optim::Adam runs eight kernels per parameter (mul_, add_, mul_,
// addcmul_, sqrt, div, add_, addcdiv_), each a pass over memory, two of them into new
// temporaries. The fused step reads each parameter, gradient and state element once and writes
// it once, for torch::optim::SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW,
// with libtorch's own arithmetic: the same scalars (computed in double and rounded to float as
// its kernels round them), the same operations in the same order, and a multiply-add fused or
// not as libtorch's CPU kernels round it on this machine (asked once, at the first fused step:
// its AVX2/AVX512 kernels use FMA, its default ones do not). The result is bitwise libtorch's on
// the machines measured (tests/unit/test_fused_step.cpp; the contract is at most 1 ulp per step).
//
// The state stays libtorch's own objects (AdamParamState's exp_avg, exp_avg_sq and step;
// SGDParamState's momentum_buffer), updated in place and created as libtorch creates them, so
// optimizer.state(), save/load and accel's checkpoints see no difference.
//
// Where it does not apply, the step is libtorch's, for the whole optimizer, and
// fused_step_refusal() says why: another optimizer type (a subclass of these three too), Adam or
// AdamW with amsgrad in any group, a parameter, gradient or state tensor that is not a
// contiguous float32 CPU tensor (CUDA, bf16, fp16, fp64, sparse gradients), or a CPU whose
// libtorch kernels round the two multiply-adds differently from each other.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "../detail/separate_compilation.hpp"

namespace accel::parallel {

// Why fused_step() leaves `optimizer` to libtorch's step(), or "" where it takes it.
ACCEL_DECL std::string fused_step_refusal(const torch::optim::Optimizer& optimizer);

// One step of `optimizer` in one pass per parameter, as libtorch's step() would make it;
// false, with nothing touched, where fused_step_refusal() is not "".
ACCEL_DECL bool fused_step(torch::optim::Optimizer& optimizer);

// How many optimizer steps fused_step() has taken in this process: to check that it applies.
ACCEL_DECL std::int64_t fused_steps_taken();

// The strategies' step: fused where it applies and `fused` (Options::fused_optimizer) is on,
// libtorch's own otherwise.
inline void step_optimizer(torch::optim::Optimizer& optimizer, bool fused) {
  if (!fused || !fused_step(optimizer)) optimizer.step();
}

}  // namespace accel::parallel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/fused_step.ipp"
#endif
