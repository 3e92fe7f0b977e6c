// Fp8's Linear layer, TransformerEngine's HYBRID recipe with delayed scaling:
//
//   forward    y = (Xq Wq^T) / (sx sw) + b, with Xq = e4m3(x sx) and Wq = e4m3(W sw): the input
//              and the weight rounded to e4m3 through their own delayed scales
//              (delayed_scaling.hpp). Products of two fp8 values are exact in fp32, which adds
//              them up as fp8 tensor cores do; y goes on in autocast's dtype (bf16 under Fp8).
//   backward   G = e5m2(dy sg); dx = (G Wq) / (sg sw), dW = (G^T Xq) / (sg sx); the bias
//              gradient is the sum of dy unrounded, as in TransformerEngine.
//
// The three products run on fp8 tensor cores (at::_scaled_mm) where they can: CUDA, libtorch 2.4
// or newer, a GPU of compute capability 8.9 or newer (Ada, Hopper: the H200 is 9.0), and every
// dimension a multiple of 16. Elsewhere they are emulated: the same fp8 operands multiplied in
// fp32, which is what the tensor cores compute up to the order of the sums. A GPU that refuses
// _scaled_mm is told once (a warning) and emulated from then on; fp8_tensor_core_matmuls()
// counts the products that ran on tensor cores.
//
// Backward uses the Xq and Wq forward made, kept in libtorch's float8 dtype where it has one
// (a byte each) and in bf16 elsewhere (which holds every e4m3 value exactly): an fp8 layer's
// saved activation is a quarter, or half, of fp32's.
//
// Amaxes are recorded by a forward that builds a graph and by every backward. A forward under
// torch::NoGradGuard (evaluation) leaves the scales alone, so that evaluating mid-training does
// not change the training.
//
// accel::Fp8Linear is a torch::nn::Linear (the same constructors, parameters and names) that
// computes so under an Fp8 Accelerator: for a layer its parent's forward calls itself, where
// accel cannot reroute a plain Linear (precision/fp8.hpp).
#pragma once

#include <torch/torch.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "../detail/separate_compilation.hpp"
#include "../detail/torch_compat.hpp"
#include "../options.hpp"
#include "delayed_scaling.hpp"
#include "float8.hpp"

namespace accel::precision {

// The delayed scaling of one fp8 Linear's three tensors.
struct Fp8LinearScaling : torch::CustomClassHolder {
  explicit Fp8LinearScaling(const Fp8Options& options)
      : input(options, Float8Format::e4m3),
        weight(options, Float8Format::e4m3),
        grad_output(options, Float8Format::e5m2) {}
  DelayedScaling input, weight, grad_output;
};

// Products of fp8 operands run through at::_scaled_mm so far, in this process.
inline std::atomic<std::uint64_t>& fp8_tensor_core_matmul_count() {
  static std::atomic<std::uint64_t> count{0};
  return count;
}
inline std::uint64_t fp8_tensor_core_matmuls() { return fp8_tensor_core_matmul_count().load(); }

// x W^T + b in fp8 (above), through `scaling`; the output in autocast's dtype where autocast is
// on for x's device, else in x's. Its autograd function is impl/fp8_linear.ipp's: compiled once
// in the separately compiled mode, not in every TU that includes <accel/accelerator.hpp>.
ACCEL_DECL torch::Tensor fp8_linear(const torch::Tensor& input, const torch::Tensor& weight,
                                    const torch::Tensor& bias,
                                    const c10::intrusive_ptr<Fp8LinearScaling>& scaling);

// What a Sequential calls in place of a plain torch::nn::Linear child under Fp8: the same
// parameters, through fp8_linear.
class Fp8LinearCallImpl : public torch::nn::Module {
 public:
  Fp8LinearCallImpl(std::shared_ptr<torch::nn::LinearImpl> linear,
                    c10::intrusive_ptr<Fp8LinearScaling> scaling)
      : linear_(std::move(linear)), scaling_(std::move(scaling)) {}

  torch::Tensor forward(torch::Tensor input) {
    return fp8_linear(input, linear_->weight, linear_->bias, scaling_);
  }

 private:
  std::shared_ptr<torch::nn::LinearImpl> linear_;
  c10::intrusive_ptr<Fp8LinearScaling> scaling_;
};

}  // namespace accel::precision

namespace accel {

// A torch::nn::Linear that computes in fp8 under an Fp8 Accelerator (prepare() attaches its
// scaling) and as torch::nn::Linear otherwise.
class Fp8LinearImpl : public torch::nn::LinearImpl {
 public:
  using LinearImpl::LinearImpl;

  torch::Tensor forward(const torch::Tensor& input) {
    if (!scaling_) return LinearImpl::forward(input);
    return precision::fp8_linear(input, weight, bias, scaling_);
  }

  void attach_fp8(c10::intrusive_ptr<precision::Fp8LinearScaling> scaling) {
    scaling_ = std::move(scaling);
  }
  bool computes_in_fp8() const { return static_cast<bool>(scaling_); }

 private:
  c10::intrusive_ptr<precision::Fp8LinearScaling> scaling_;
};
TORCH_MODULE(Fp8Linear);

}  // namespace accel

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/fp8_linear.ipp"
#endif
