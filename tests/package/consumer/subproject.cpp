// accel as a subproject (add_subdirectory), or installed (find_package) where the package checks
// compile none of accel's bodies: this TU reaches accel's headers and libraries only through
// accel::accel's usage requirements. It stays torch-free on purpose: accel's bodies compiled
// inline in a strict user TU are package.copied_headers' check, which pays for one header-only
// TU so that this one does not.
#include <accel/policy.hpp>
#include <accel/version.hpp>

#include <cstdio>
#include <string_view>

int main() {
  static_assert(accel::Zero3::shards_parameters);
  const std::string_view name = accel::Zero3::name;
  if (name != "Zero3") {
    std::printf("unexpected policy name '%.*s'\n", static_cast<int>(name.size()), name.data());
    return 1;
  }
  std::printf("consumer ok: accel %d.%d.%d through accel::accel\n", ACCEL_VERSION_MAJOR,
              ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH);
  return 0;
}
