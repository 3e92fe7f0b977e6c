#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <sys/prctl.h>

int main(int argc, char** argv) {
  // Orphans of a misbehaving launcher come here rather than to init, where each test's cleanup
  // can see and stop them (and the checks can see them as left behind).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  return doctest::Context(argc, argv).run();
}
