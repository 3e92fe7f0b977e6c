// Timeouts: positive, overridable from the environment, and refused with the value named; the
// shared-memory switch read from the environment.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include "helpers.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_timeouts {

using namespace std::chrono_literals;

TEST_CASE("a timeout of zero or less is refused, naming the option") {
  CHECK_THROWS_WITH_AS(accel::Accelerator<accel::Ddp>({.timeout = 0ms}),
                       doctest::Contains("Options::timeout is 0 ms; it must be positive"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(accel::Accelerator<accel::Ddp>({.rendezvous_timeout = -5ms}),
                       doctest::Contains("Options::rendezvous_timeout is -5 ms"), accel::Error);
}

TEST_CASE("ACCEL_TIMEOUT and ACCEL_RENDEZVOUS_TIMEOUT replace the options, in seconds") {
  {
    accel_test::ScopedEnv env({{"ACCEL_TIMEOUT", "2.5"}, {"ACCEL_RENDEZVOUS_TIMEOUT", "40"}});
    const auto settings = accel::runtime::with_environment({.timeout = 30min});
    CHECK(settings.timeout == 2500ms);
    CHECK(settings.rendezvous_timeout == 40s);
  }
  {
    accel_test::ScopedEnv env("ACCEL_TIMEOUT", "soon");
    CHECK_THROWS_WITH_AS(
        accel::runtime::with_environment({}),
        doctest::Contains("ACCEL_TIMEOUT='soon' is not a positive number of seconds"),
        accel::Error);
  }
  {
    accel_test::ScopedEnv env("ACCEL_TIMEOUT", "0");
    CHECK_THROWS_AS(accel::runtime::with_environment({}), accel::Error);
  }
  accel_test::ScopedEnv unset({{"ACCEL_TIMEOUT", nullptr}, {"ACCEL_RENDEZVOUS_TIMEOUT", nullptr}});
  CHECK(accel::runtime::with_environment({}).timeout == 30min);
}

TEST_CASE("ACCEL_SHARED_MEMORY=0 turns the shared-memory path off, it cannot turn it on") {
  {
    accel_test::ScopedEnv env("ACCEL_SHARED_MEMORY", nullptr);
    CHECK(accel::runtime::with_environment({}).shared_memory);
    CHECK_FALSE(accel::runtime::with_environment({.shared_memory = false}).shared_memory);
  }
  {
    accel_test::ScopedEnv env("ACCEL_SHARED_MEMORY", "0");
    CHECK_FALSE(accel::runtime::with_environment({}).shared_memory);
  }
  {
    accel_test::ScopedEnv env("ACCEL_SHARED_MEMORY", "1");
    CHECK_FALSE(accel::runtime::with_environment({.shared_memory = false}).shared_memory);
  }
  accel_test::ScopedEnv env("ACCEL_SHARED_MEMORY", "off");
  CHECK_THROWS_WITH_AS(accel::runtime::with_environment({}),
                       doctest::Contains("ACCEL_SHARED_MEMORY='off' is not an integer"),
                       accel::Error);
}

TEST_CASE("a mean of integers is refused on one process too") {
  accel::Accelerator<accel::Ddp> accelerator;
  CHECK_THROWS_WITH_AS(accelerator.reduce(torch::ones({2}, torch::kInt), accel::ReduceOp::mean),
                       doctest::Contains("a mean over the ranks of a Int tensor"), accel::Error);
  CHECK(torch::equal(accelerator.reduce(torch::ones({2}, torch::kInt)), torch::ones({2}, torch::kInt)));
}

}  // namespace unit_timeouts
