// doctest's runtime, without a main: the tests' one precompiled header (tests/CMakeLists.txt)
// brings <doctest/doctest.h>, whose every includer registers itself with doctest at start-up, so
// the workers, which run no doctest case, still link it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
