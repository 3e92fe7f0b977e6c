// The facts torch_compat.hpp states about the libtorch it is compiled against, checked against
// that libtorch: each constant must be true exactly when the operation works.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include <vector>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_torch_compat {

namespace {
template <class Op>
bool works(Op&& op) {
  try {
    op();
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}
}  // namespace

TEST_CASE("cpu_has_half_matmul: fp16 matmul on CPU") {
  const auto a = torch::ones({2, 2}, torch::kHalf);
  CHECK(works([&] { (void)torch::matmul(a, a); }) == accel::detail::cpu_has_half_matmul);
}

TEST_CASE("cpu_has_amp_scaler_ops: the AMP unscale op on CPU tensors") {
  std::vector<torch::Tensor> grads{torch::ones({3})};
  auto found_inf = torch::zeros({1});
  const auto inverse_scale = torch::ones({1});
  CHECK(works([&] {
          torch::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inverse_scale);
        }) == accel::detail::cpu_has_amp_scaler_ops);
}

TEST_CASE("has_float8: float8 dtypes") {
#if ACCEL_TORCH_AT_LEAST(2, 1)
  CHECK(accel::detail::has_float8);
  const auto x = torch::tensor({1.5f, -2.0f}).to(at::kFloat8_e4m3fn).to(torch::kFloat);
  CHECK(torch::equal(x, torch::tensor({1.5f, -2.0f})));
#else
  CHECK_FALSE(accel::detail::has_float8);
#endif
}

TEST_CASE("autocast API: the guard's settings are what autocast reports") {
  accel::Accelerator<accel::Ddp, accel::Bf16> accelerator;
  const auto guard = accelerator.autocast();
  CHECK(accel::detail::autocast_enabled(torch::kCPU));
  CHECK((accel::detail::autocast_dtype(torch::kCPU) == torch::kBFloat16));
  CHECK((torch::matmul(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type() == torch::kBFloat16));
}

}  // namespace unit_torch_compat
