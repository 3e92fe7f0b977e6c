#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <sys/prctl.h>

#include "../skip.hpp"

REGISTER_LISTENER("accel_skips", 1, accel_test::SkipCounter);

int main(int argc, char** argv) {
  // Orphans of a misbehaving launcher come here rather than to init, where each test's cleanup
  // can see and stop them (and the checks can see them as left behind).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;
  return accel_test::exit_status(status);  // 77 when the case run skipped (tests/skip.hpp)
}
