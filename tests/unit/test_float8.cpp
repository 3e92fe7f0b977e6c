// Fp8's two formats: rounding to e4m3 and e5m2 (precision/float8.hpp) against the formats'
// definitions, the emulation against libtorch's float8 dtypes where they exist (2.6).
#include <accel/precision/float8.hpp>
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_float8 {

namespace {

using accel::precision::Float8Format;
using accel::precision::round_to_float8;
using accel::precision::round_to_float8_emulated;

// Every finite non-negative value of a format, ascending, from its definition: exponent field E,
// mantissa field M; E = 0 is subnormal (M x 2^(emin - m)); e4m3 has no inf and its E = 15,
// M = 7 is nan; e5m2's E = 31 is inf and nan.
std::vector<float> finite_values(Float8Format format) {
  const bool e4m3 = format == Float8Format::e4m3;
  const int m = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, top = e4m3 ? 15 : 30;
  std::vector<float> values;
  for (int e = 0; e <= top; ++e)
    for (int k = 0; k < (1 << m); ++k) {
      if (e4m3 && e == 15 && k == 7) continue;  // nan
      values.push_back(e == 0 ? std::ldexp(static_cast<float>(k), 1 - bias - m)
                              : std::ldexp(1.0f + static_cast<float>(k) / (1 << m), e - bias));
    }
  return values;
}

float rounded(float x, Float8Format format) {
  return round_to_float8_emulated(torch::tensor({x}), format).item<float>();
}

const float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("float8: every value of each format is kept, and each midpoint goes to the even one") {
  for (const auto format : {Float8Format::e4m3, Float8Format::e5m2}) {
    CAPTURE(accel::precision::spec_of(format).name);
    const auto values = finite_values(format);
    CHECK(values.size() == (format == Float8Format::e4m3 ? 127u : 124u));
    CHECK(values.back() == accel::precision::spec_of(format).max);
    const auto tensor = torch::tensor(values);
    CHECK(torch::equal(round_to_float8_emulated(tensor, format), tensor));
    CHECK(torch::equal(round_to_float8_emulated(-tensor, format), -tensor));
    // Between neighbours: the midpoint ties to the one whose last mantissa bit is 0 (even
    // index), a hair either side goes to the nearer.
    for (std::size_t i = 0; i + 1 < values.size(); ++i) {
      const float low = values[i], high = values[i + 1], mid = (low + high) / 2;
      CAPTURE(low);
      CHECK(rounded(mid, format) == (i % 2 == 0 ? low : high));
      CHECK(rounded(std::nextafter(mid, 0.0f), format) == low);
      CHECK(rounded(std::nextafter(mid, kInf), format) == high);
    }
  }
}

TEST_CASE("float8: relative error within 2^-4 (e4m3) and 2^-3 (e5m2) on normal values") {
  torch::manual_seed(8);
  for (const auto format : {Float8Format::e4m3, Float8Format::e5m2}) {
    const auto spec = accel::precision::spec_of(format);
    CAPTURE(spec.name);
    // Log-uniform over the normal range, both signs.
    const double low = std::ldexp(1.0, spec.min_normal_exponent), high = spec.max;
    const auto x = torch::exp(torch::rand({100000}, torch::kDouble) * std::log(high / low) +
                              std::log(low)).to(torch::kFloat) *
                   (torch::randint(0, 2, {100000}) * 2 - 1);
    const auto error = ((round_to_float8(x, format) - x) / x).abs().max().item<double>();
    CHECK(error <= std::ldexp(1.0, -(spec.mantissa_bits + 1)));
    CHECK(error > std::ldexp(1.0, -(spec.mantissa_bits + 2)));  // and the bound is reached
  }
}

TEST_CASE("float8: saturation at 448 and 57344, subnormals, nan, inf and signed zero") {
  using F = Float8Format;
  CHECK(rounded(449.0f, F::e4m3) == 448.0f);
  CHECK(rounded(479.0f, F::e4m3) == 448.0f);
  CHECK(rounded(1e6f, F::e4m3) == 448.0f);
  CHECK(rounded(-1e30f, F::e4m3) == -448.0f);
  CHECK(rounded(kInf, F::e4m3) == 448.0f);
  CHECK(rounded(-kInf, F::e4m3) == -448.0f);
  CHECK(rounded(60000.0f, F::e5m2) == 57344.0f);
  CHECK(rounded(1e9f, F::e5m2) == 57344.0f);
  CHECK(rounded(kInf, F::e5m2) == 57344.0f);
  CHECK(rounded(-kInf, F::e5m2) == -57344.0f);
  // Subnormals: fixed steps of 2^-9 (e4m3) and 2^-16 (e5m2); half the smallest ties to 0.
  CHECK(rounded(std::ldexp(1.0f, -9), F::e4m3) == std::ldexp(1.0f, -9));
  CHECK(rounded(std::ldexp(1.0f, -10), F::e4m3) == 0.0f);
  CHECK(rounded(std::ldexp(1.5f, -10), F::e4m3) == std::ldexp(1.0f, -9));
  CHECK(rounded(std::ldexp(3.0f, -10), F::e4m3) == std::ldexp(2.0f, -9));  // tie to even
  CHECK(rounded(std::ldexp(5.0f, -9), F::e4m3) == std::ldexp(5.0f, -9));
  CHECK(rounded(std::ldexp(1.0f, -16), F::e5m2) == std::ldexp(1.0f, -16));
  CHECK(rounded(std::ldexp(1.0f, -17), F::e5m2) == 0.0f);
  CHECK(rounded(std::ldexp(3.0f, -17), F::e5m2) == std::ldexp(2.0f, -16));
  CHECK(rounded(1e-30f, F::e5m2) == 0.0f);
  for (const auto format : {F::e4m3, F::e5m2}) {
    CHECK(std::isnan(rounded(std::numeric_limits<float>::quiet_NaN(), format)));
    const float negative_zero = rounded(-0.0f, format);
    CHECK(negative_zero == 0.0f);
    CHECK(std::signbit(negative_zero));
    CHECK(std::signbit(rounded(-std::ldexp(1.0f, -20), format)));  // -tiny rounds to -0
  }
}

// Registered only where libtorch has the float8 dtypes (2.1 and newer; tests/skip.hpp).
TEST_CASE("float8: the emulation gives the float8 dtypes' bits (libtorch 2.1 and newer)" *
          doctest::skip(!accel::detail::has_float8)) {
  torch::manual_seed(9);
  for (const auto format : {Float8Format::e4m3, Float8Format::e5m2}) {
    const auto spec = accel::precision::spec_of(format);
    CAPTURE(spec.name);
    // From far below the subnormals to far above the largest value, both signs; every
    // midpoint and neighbour of it; the special values.
    auto x = torch::exp(torch::rand({200000}, torch::kDouble) * 80 - 50).to(torch::kFloat) *
             (torch::randint(0, 2, {200000}) * 2 - 1);
    std::vector<float> edges{0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN()};
    const auto values = finite_values(format);
    for (std::size_t i = 0; i + 1 < values.size(); ++i) {
      const float mid = (values[i] + values[i + 1]) / 2;
      for (const float v : {values[i], mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)})
        edges.insert(edges.end(), {v, -v});
    }
    x = torch::cat({x, torch::tensor(edges)});
    const auto emulated = round_to_float8_emulated(x, format);
    const auto native = accel::precision::round_to_float8_native(x, format);
    // nan in the same places; every other value bit for bit (-0 as -0).
    const auto nan = emulated.isnan();
    CHECK(torch::equal(nan, native.isnan()));
    CHECK(nan.sum().item<std::int64_t>() == 1);
    CHECK(torch::equal(emulated.masked_select(~nan).view(torch::kInt),
                       native.masked_select(~nan).view(torch::kInt)));
  }
}

}  // namespace unit_float8
