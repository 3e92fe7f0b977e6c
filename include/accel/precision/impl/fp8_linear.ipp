// Fp8's Linear: the fp8 products and their autograd function; fp8_linear.hpp includes it in
// header-only mode.
#pragma once

#include "../fp8_linear.hpp"

namespace accel::precision {

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
    if (bias.numel() > 0) y.add_(bias.to(torch::kFloat));  // empty: a layer without bias

    ctx->save_for_backward({kept_for_backward(xq), kept_for_backward(wq)});
    ctx->saved_data["scaling"] = c10::IValue::make_capsule(scaling);
    ctx->saved_data["sx"] = sx;
    ctx->saved_data["sw"] = sw;
    ctx->saved_data["input_sizes"] = input.sizes().vec();
    ctx->saved_data["input_dtype"] = static_cast<std::int64_t>(input.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<std::int64_t>(weight.scalar_type());
    ctx->saved_data["bias_dtype"] = static_cast<std::int64_t>(bias.scalar_type());
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

ACCEL_DECL torch::Tensor fp8_linear(const torch::Tensor& input, const torch::Tensor& weight,
                                    const torch::Tensor& bias,
                                    const c10::intrusive_ptr<Fp8LinearScaling>& scaling) {
  const c10::DeviceType device = input.device().type();
  const c10::ScalarType output = accel::detail::autocast_enabled(device)
                                     ? accel::detail::autocast_dtype(device)
                                     : input.scalar_type();
  // A layer without bias (LinearOptions::bias(false), a split row layer's partial product):
  // an empty tensor stands for it, since libtorch 1.13's autograd functions refuse an undefined
  // tensor argument ("tensor does not have a device").
  const torch::Tensor given = bias.defined() ? bias : torch::empty({0}, weight.options());
  return Fp8LinearFunction::apply(input, weight, given, scaling, torch::GradMode::is_enabled(),
                                  output);
}

}  // namespace accel::precision
