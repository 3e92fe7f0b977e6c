// expect: accel: a type tagged as a precision policy .category = accel::policy::precision_tag. has no `static constexpr ComputeType compute`
// The real Accelerator with a tagged but incomplete policy: the member is named and no error
// follows from code that would have used it (before, this trained in fp32 without a word).
#include <accel/accelerator.hpp>

struct MyPrecision {
  using category = accel::policy::precision_tag;
  static constexpr std::string_view name = "MyPrecision";
#ifdef ACCEL_TWIN
  static constexpr auto compute = accel::policy::ComputeType::bfloat16;
#endif
  static constexpr bool autocast = true;
  static constexpr bool loss_scaling = false;
};
// Its behaviour (precision/precision.hpp), so that the missing member is the one error.
template <>
struct accel::precision::Precision<MyPrecision> : accel::precision::WithoutLossScaling {
  void attach(accel::runtime::ProcessGroup* /*group*/, const accel::Options& /*options*/,
              const torch::Device& /*device*/) {}
  void prepare_model(const std::shared_ptr<torch::nn::Module>& /*model*/,
                     const std::string& /*label*/) {}
};

int main() {
  accel::Accelerator<accel::Ddp, MyPrecision> accelerator;
  torch::nn::Linear net(2, 2);
  auto model = accelerator.prepare(net);
  model(torch::ones({1, 2}));
}
