// expect: accel: a type tagged as a parallelism policy .category = accel::policy::parallelism_tag. has no `static constexpr bool shards_optimizer_state`, `shards_gradients` or `shards_parameters`
// Tagged and named, but silent on what it shards: estimate_memory and the Accelerator read it.
#include "accelerator.hpp"

struct MyPolicy {
  using category = accel::policy::parallelism_tag;
  static constexpr std::string_view name = "MyPolicy";
  static constexpr bool shards_optimizer_state = false;
  static constexpr bool shards_gradients = false;
#ifdef ACCEL_TWIN
  static constexpr bool shards_parameters = false;
#endif
};

int main() { [[maybe_unused]] Accelerator<MyPolicy> accelerator; }
