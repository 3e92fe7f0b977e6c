// expect: accel: a type tagged as a sharding strategy .category = accel::policy::sharding_tag. has no `static constexpr std::string_view name`
// Fsdp<S> is named after its sharding: without a name, two shardings of a user's would share one.
#include "accelerator.hpp"

struct MySharding {
  using category = accel::policy::sharding_tag;
  static constexpr bool shards_optimizer_state = true;
  static constexpr bool shards_gradients = true;
  static constexpr bool shards_parameters = true;
#ifdef ACCEL_TWIN
  static constexpr std::string_view name = "MySharding";
#endif
};

int main() { [[maybe_unused]] Accelerator<accel::Fsdp<MySharding>> accelerator; }
