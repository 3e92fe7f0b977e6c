// expect: accel: a type tagged as a sharding strategy .category = accel::policy::sharding_tag. has no `static constexpr bool shards_gradients`
// Tagged but incomplete: before, this printed that Fsdp's argument was not a sharding strategy.
#include "accelerator.hpp"

struct MySharding {
  using category = accel::policy::sharding_tag;
  static constexpr std::string_view name = "MySharding";
  static constexpr bool shards_optimizer_state = true;
#ifdef ACCEL_TWIN
  static constexpr bool shards_gradients = true;
#endif
  static constexpr bool shards_parameters = true;
};

int main() { [[maybe_unused]] Accelerator<accel::Fsdp<MySharding>> accelerator; }
