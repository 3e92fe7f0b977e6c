// Fp8's delayed scaling for one tensor (precision/delayed_scaling.hpp): the scale from the amax
// history (max or most recent, with a margin), kept where the amax is 0 or not finite, the
// history's window, quantizing through the scale, and the state a checkpoint saves.
#include <accel/precision/delayed_scaling.hpp>
#include <doctest/doctest.h>

#include <limits>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_delayed_scaling {

namespace {

using accel::AmaxAlgorithm;
using accel::Fp8Options;
using accel::precision::DelayedScaling;
using accel::precision::Float8Format;

// One step whose tensor has amax `amax`.
void step(DelayedScaling& scaling, float amax) {
  scaling.quantize(torch::tensor({amax / 2, -amax, 0.0f}));
  scaling.update();
}

}  // namespace

TEST_CASE("delayed scaling: TransformerEngine's defaults, and bad knobs named") {
  const Fp8Options defaults;
  CHECK(defaults.amax_history_len == 1024);
  CHECK(defaults.margin == 0);
  CHECK(defaults.amax_compute_algo == AmaxAlgorithm::max);
  CHECK_THROWS_WITH_AS(DelayedScaling({.amax_history_len = 0}, Float8Format::e4m3),
                       "accel: Options::fp8.amax_history_len is 0; it must be at least 1 step "
                       "(default 1024)",
                       accel::Error);
  CHECK_THROWS_WITH_AS(DelayedScaling({.margin = -1}, Float8Format::e4m3),
                       doctest::Contains("Options::fp8.margin is -1"), accel::Error);
}

TEST_CASE("delayed scaling: scale = FP8_MAX x 2^-margin / the history's max, over its window") {
  DelayedScaling scaling({.amax_history_len = 3, .margin = 1}, Float8Format::e4m3);
  CHECK(scaling.scale() == 1.0f);  // before any step
  step(scaling, 2.0f);
  CHECK(scaling.scale() == 448.0f / 2 / 2);
  step(scaling, 8.0f);
  CHECK(scaling.scale() == 448.0f / 2 / 8);
  step(scaling, 4.0f);
  CHECK(scaling.scale() == 448.0f / 2 / 8);  // 2, 8, 4
  step(scaling, 1.0f);
  CHECK(scaling.scale() == 448.0f / 2 / 8);  // 8, 4, 1
  step(scaling, 1.0f);
  CHECK(scaling.scale() == 448.0f / 2 / 4);  // 4, 1, 1: the 8 has left the window
  // Several quantizations in one step: the largest amax counts.
  scaling.quantize(torch::tensor({3.0f}));
  scaling.quantize(torch::tensor({-16.0f}));
  scaling.update();
  CHECK(scaling.scale() == 448.0f / 2 / 16);
}

TEST_CASE("delayed scaling: most_recent, e5m2's maximum, and amax 0, inf or nan keep the scale") {
  DelayedScaling scaling({.amax_history_len = 4, .amax_compute_algo = AmaxAlgorithm::most_recent},
                         Float8Format::e5m2);
  step(scaling, 8.0f);
  CHECK(scaling.scale() == 57344.0f / 8);
  step(scaling, 2.0f);
  CHECK(scaling.scale() == 57344.0f / 2);
  step(scaling, 0.0f);
  CHECK(scaling.scale() == 57344.0f / 2);
  step(scaling, std::numeric_limits<float>::infinity());
  CHECK(scaling.scale() == 57344.0f / 2);
}

TEST_CASE("delayed scaling: quantize rounds x x scale to the format and divides back") {
  DelayedScaling scaling({.amax_history_len = 2}, Float8Format::e4m3);
  step(scaling, 3.5f);  // scale 128: 3.5 x 128 = 448, the largest e4m3 value
  REQUIRE(scaling.scale() == 128.0f);
  const auto x = torch::tensor({3.5f, 1.0f, 0.3f, -2.0f, 1e-6f});
  const auto q = scaling.quantize(x);
  CHECK(torch::equal(q, accel::precision::round_to_float8(x * 128.0f, Float8Format::e4m3) / 128.0f));
  CHECK(q[0].item<float>() == 3.5f);
  CHECK(q[1].item<float>() == 1.0f);
  // 0.3 x 128 = 38.4 lies between 36 and 40 (step 4 in [32, 64)): 40 / 128.
  CHECK(q[2].item<float>() == 40.0f / 128);
  // A value beyond the history's amax saturates at 448 / scale.
  CHECK(scaling.quantize(torch::tensor({100.0f})).item<float>() == 3.5f);
}

TEST_CASE("delayed scaling: the state a checkpoint saves comes back whole") {
  const Fp8Options options{.amax_history_len = 3};
  DelayedScaling scaling(options, Float8Format::e4m3);
  step(scaling, 2.0f);
  step(scaling, 7.0f);
  const auto saved = scaling.state();
  CHECK(saved.amax_history == std::vector<float>{0.0f, 7.0f, 2.0f});
  CHECK(saved.scale == 64.0f);
  DelayedScaling restored(options, Float8Format::e4m3);
  restored.load_state(saved);
  CHECK(restored.scale() == 64.0f);
  step(scaling, 1.0f);
  step(restored, 1.0f);
  CHECK(restored.state().amax_history == scaling.state().amax_history);
  CHECK(restored.scale() == scaling.scale());
  DelayedScaling shorter({.amax_history_len = 2}, Float8Format::e4m3);
  CHECK_THROWS_WITH_AS(shorter.load_state(saved),
                       doctest::Contains("an amax history of 3 steps, and "
                                         "Options::fp8.amax_history_len is 2"),
                       accel::Error);
}

}  // namespace unit_delayed_scaling
