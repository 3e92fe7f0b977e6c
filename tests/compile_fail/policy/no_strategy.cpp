// expect: accel: no parallel::Strategy specialization for this parallelism policy
// A complete parallelism policy of the user's own that nobody taught accel: the Accelerator's
// strategy member, parallel::Strategy<MyPolicy>, is the primary template.
#include <accel/parallel/strategy.hpp>
#include <accel/policy.hpp>

struct MyPolicy {
  using category = accel::policy::parallelism_tag;
  static constexpr std::string_view name = "MyPolicy";
};

#ifdef ACCEL_TWIN
template <>
struct accel::parallel::Strategy<MyPolicy> {};
#endif

int main() {
  static_assert(accel::policy::Checked<MyPolicy, accel::Fp32, accel::GradAccum<1>>::value);
  [[maybe_unused]] accel::parallel::Strategy<MyPolicy> strategy;
}
