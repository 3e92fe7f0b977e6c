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

// Per CUDA device: whether _scaled_mm has worked there (1), was refused (2), or is untried (0).
inline std::atomic<int>& scaled_mm_state_of(c10::DeviceIndex device) {
  static std::array<std::atomic<int>, 64> states{};
  return states[static_cast<std::size_t>(device) % states.size()];
}

// (a b) / (sa sb) in fp32, for a [m, k] and b [k, n] holding values on an fp8 grid (x s rounded
// to e4m3, or e5m2 for a; in any dtype that holds them exactly): on fp8 tensor cores where they
// apply (above), else emulated.
inline torch::Tensor fp8_grid_matmul(const torch::Tensor& a, Float8Format a_format, double sa,
                                     const torch::Tensor& b, double sb) {
  if constexpr (accel::detail::has_scaled_mm) {
    const bool shapes_fit = a.size(0) % 16 == 0 && a.size(1) % 16 == 0 && b.size(1) % 16 == 0;
    if (a.is_cuda() && shapes_fit) {
      std::atomic<int>& state = scaled_mm_state_of(a.device().index());
      if (state.load() != 2) {
        try {
          const auto on = torch::TensorOptions().device(a.device()).dtype(torch::kFloat);
          // _scaled_mm's layout: a row-major, b column-major (b^T contiguous).
          torch::Tensor out = accel::detail::scaled_mm(
              a.to(*float8_dtype_of(a_format)).contiguous(),
              b.to(*float8_dtype_of(Float8Format::e4m3)).t().contiguous().t(),
              torch::full({}, 1.0 / sa, on), torch::full({}, 1.0 / sb, on));
          state.store(1);
          ++fp8_tensor_core_matmul_count();
          return out;
        } catch (const c10::Error& error) {
          if (state.load() == 1) throw;  // it worked on this device: a real error
          state.store(2);
          TORCH_WARN("accel: Fp8 on ", a.device().str(), ": at::_scaled_mm is refused (",
                     error.what_without_backtrace(),
                     "); fp8 matmuls on this device are emulated in fp32 from now on (the same "
                     "rounding, without the tensor cores' speed)");
        }
      }
    }
  }
  return a.to(torch::kFloat).matmul(b.to(torch::kFloat)).mul_(1.0 / (sa * sb));
}

// How backward keeps a tensor of e4m3 values: exact in either dtype.
inline torch::Tensor kept_for_backward(const torch::Tensor& grid) {
  return grid.to(accel::detail::float8_e4m3_dtype.value_or(c10::ScalarType::BFloat16));
}

struct Fp8LinearFunction : torch::autograd::Function<Fp8LinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const c10::intrusive_ptr<Fp8LinearScaling>& scaling, bool record,
                               c10::ScalarType output_dtype) {
    // The arithmetic is this function's own: autocast would round the products to bf16.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const std::int64_t out_features = weight.size(0), in_features = weight.size(1);
    const torch::Tensor xq = scaling->input.to_grid(input.reshape({-1, in_features}), record);
    const torch::Tensor wq = scaling->weight.to_grid(weight, record);
    const double sx = scaling->input.scale(), sw = scaling->weight.scale();
    torch::Tensor y = fp8_grid_matmul(xq, Float8Format::e4m3, sx, wq.t(), sw);
    if (bias.defined()) y.add_(bias.to(torch::kFloat));

    ctx->save_for_backward({kept_for_backward(xq), kept_for_backward(wq)});
    ctx->saved_data["scaling"] = c10::IValue::make_capsule(scaling);
    ctx->saved_data["sx"] = sx;
    ctx->saved_data["sw"] = sw;
    ctx->saved_data["input_sizes"] = input.sizes().vec();
    ctx->saved_data["input_dtype"] = static_cast<std::int64_t>(input.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<std::int64_t>(weight.scalar_type());
    ctx->saved_data["bias_dtype"] =
        static_cast<std::int64_t>(bias.defined() ? bias.scalar_type() : weight.scalar_type());
    std::vector<std::int64_t> sizes = input.sizes().vec();
    sizes.back() = out_features;
    return y.to(output_dtype).reshape(sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& xq = saved[0];
    const torch::Tensor& wq = saved[1];
    const auto scaling = c10::static_intrusive_pointer_cast<Fp8LinearScaling>(
        ctx->saved_data.at("scaling").toCapsule());
    const double sx = ctx->saved_data.at("sx").toDouble(), sw = ctx->saved_data.at("sw").toDouble();
    const auto dtype = [&](const char* key) {
      return static_cast<c10::ScalarType>(ctx->saved_data.at(key).toInt());
    };

    const torch::Tensor dy = grad_outputs[0].reshape({-1, wq.size(0)});
    const torch::Tensor g = scaling->grad_output.to_grid(dy, /*record=*/true);
    const double sg = scaling->grad_output.scale();
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0))
      dx = fp8_grid_matmul(g, Float8Format::e5m2, sg, wq, sw)
               .to(dtype("input_dtype"))
               .reshape(ctx->saved_data.at("input_sizes").toIntVector());
    if (ctx->needs_input_grad(1))
      dw = fp8_grid_matmul(g.t(), Float8Format::e5m2, sg, xq, sx).to(dtype("weight_dtype"));
    if (ctx->needs_input_grad(2)) db = dy.to(torch::kFloat).sum(0).to(dtype("bias_dtype"));
    return {dx, dw, db, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// x W^T + b in fp8 (above), through `scaling`; the output in autocast's dtype where autocast is
// on for x's device, else in x's.
inline torch::Tensor fp8_linear(const torch::Tensor& input, const torch::Tensor& weight,
                                const torch::Tensor& bias,
                                const c10::intrusive_ptr<Fp8LinearScaling>& scaling) {
  const c10::DeviceType device = input.device().type();
  const c10::ScalarType output = accel::detail::autocast_enabled(device)
                                     ? accel::detail::autocast_dtype(device)
                                     : input.scalar_type();
  return Fp8LinearFunction::apply(input, weight, bias, scaling,
                                          torch::GradMode::is_enabled(), output);
}

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
