// expect: accel: no precision::Precision specialization for this precision policy
// A complete precision policy of the user's own that nobody taught accel: the Accelerator's
// precision member, precision::Precision<MyPrecision>, is the primary template.
#include <accel/policy.hpp>
#include <accel/precision/precision.hpp>

struct MyPrecision {
  using category = accel::policy::precision_tag;
  static constexpr std::string_view name = "MyPrecision";
  static constexpr auto compute = accel::policy::ComputeType::bfloat16;
  static constexpr bool autocast = true;
  static constexpr bool loss_scaling = false;
};

#ifdef ACCEL_TWIN
template <>
struct accel::precision::Precision<MyPrecision> {};
#endif

int main() {
  static_assert(accel::policy::Checked<accel::Ddp, MyPrecision, accel::GradAccum<1>>::value);
  [[maybe_unused]] accel::precision::Precision<MyPrecision> precision;
}
