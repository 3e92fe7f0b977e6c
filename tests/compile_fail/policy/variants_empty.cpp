// expect: accel: Variants<> needs at least one Accelerator alias
// accel::Variants with no alias: nothing could ever be run. No torch: variants.hpp needs none
// until a variant is named.
#include <accel/variants.hpp>

struct AnyAlias {};

int main() {
#ifdef ACCEL_TWIN
  [[maybe_unused]] accel::Variants<AnyAlias> variants;
#else
  [[maybe_unused]] accel::Variants<> variants;
#endif
}
