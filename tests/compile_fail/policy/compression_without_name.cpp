// expect: accel: a type tagged as a gradient compression .category = accel::policy::compression_tag. has no `static constexpr std::string_view name`
// A compression without a name would make DdpWith<C> go by a placeholder, the same for every
// such compression: two of them could not be told apart in checkpoints and variant names.
#include "accelerator.hpp"

struct MyCompression {
  using category = accel::policy::compression_tag;
  static constexpr auto wire = accel::policy::ComputeType::float16;
#ifdef ACCEL_TWIN
  static constexpr std::string_view name = "MyCompression";
#endif
};

int main() { [[maybe_unused]] Accelerator<accel::DdpWith<MyCompression>> accelerator; }
