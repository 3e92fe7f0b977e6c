// expect: accel: a type tagged as a precision policy .category = accel::policy::precision_tag. has no `static constexpr bool autocast`
// Tagged but incomplete: before, this compiled as Accelerator<Ddp, Fp32> (a precision without
// one of compute, autocast, loss_scaling) or failed later, wherever the name was printed.
#include "accelerator.hpp"

struct MyPrecision {
  using category = accel::policy::precision_tag;
  static constexpr std::string_view name = "MyPrecision";
  static constexpr auto compute = accel::policy::ComputeType::bfloat16;
#ifdef ACCEL_TWIN
  static constexpr bool autocast = true;
#endif
  static constexpr bool loss_scaling = false;
};

int main() { [[maybe_unused]] Accelerator<accel::Ddp, MyPrecision> accelerator; }
