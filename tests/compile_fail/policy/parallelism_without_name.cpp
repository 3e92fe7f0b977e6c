// expect: accel: a type tagged as a parallelism policy .category = accel::policy::parallelism_tag. has no `static constexpr std::string_view name`
// Tagged but incomplete: before, this compiled as Accelerator<Ddp>.
#include "accelerator.hpp"

struct MyPolicy {
  using category = accel::policy::parallelism_tag;
  static constexpr bool shards_optimizer_state = false;
  static constexpr bool shards_gradients = false;
  static constexpr bool shards_parameters = false;
#ifdef ACCEL_TWIN
  static constexpr std::string_view name = "MyPolicy";
#endif
};

int main() { [[maybe_unused]] Accelerator<MyPolicy> accelerator; }
