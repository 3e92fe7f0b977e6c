// expect: accel: no precision::Precision specialization for this precision policy
// A complete precision policy of the user's own that nobody taught accel: the Accelerator's
// precision, precision::Precision<MyPrecision>, is the primary template. The twin teaches it: a
// precision that meets the whole contract (precision/contract.hpp), taking loss scaling and
// state from WithoutLossScaling and writing its setup, as docs/concepts/policies.md#writing-a-precision
// shows.
#include "training_loop.hpp"

struct MyPrecision {
  using category = accel::policy::precision_tag;
  static constexpr std::string_view name = "MyPrecision";
  static constexpr auto compute = accel::policy::ComputeType::bfloat16;
  static constexpr bool autocast = true;
  static constexpr bool loss_scaling = false;
};

#ifdef ACCEL_TWIN
template <>
struct accel::precision::Precision<MyPrecision> : accel::precision::WithoutLossScaling {
  void attach(accel::runtime::ProcessGroup* /*group*/, const accel::Options& /*options*/,
              const torch::Device& /*device*/) {}
  void prepare_model(const std::shared_ptr<torch::nn::Module>& /*model*/,
                     const std::string& /*label*/) {}
};
#endif

int main() { training_loop<accel::Accelerator<accel::Ddp, MyPrecision>>(); }
