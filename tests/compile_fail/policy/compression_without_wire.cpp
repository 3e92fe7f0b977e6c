// expect: accel: a type tagged as a gradient compression .category = accel::policy::compression_tag. has no `static constexpr ComputeType wire`
// Tagged but incomplete: before, this printed that DdpWith's argument was not a compression.
#include "accelerator.hpp"

struct MyCompression {
  using category = accel::policy::compression_tag;
  static constexpr std::string_view name = "MyCompression";
#ifdef ACCEL_TWIN
  static constexpr auto wire = accel::policy::ComputeType::float16;
#endif
};

int main() { [[maybe_unused]] Accelerator<accel::DdpWith<MyCompression>> accelerator; }
