// The shared-memory transport's reduction loops, without any transport: the one-pass loop for
// 2 to 4 ranks gives bitwise what the general blocked loop gives, into one output and into
// every input; what it does not take (5 ranks, max, integers) is left to the blocked loop.
#include <accel/runtime/shm/elements.hpp>
#include <c10/util/BFloat16.h>
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_shm_elements {

namespace {

namespace shm = accel::runtime::shm;
namespace elements = accel::runtime::shm::elements;

template <class T>
T make(double v) {
  if constexpr (std::is_same_v<T, elements::Bf16>)
    return elements::to_bf16(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// Rank r's inputs: values whose sums round (thirds, mixed magnitudes, signs), so that a
// different order or rounding would show.
template <class T>
std::vector<std::vector<T>> inputs(int ranks, std::size_t count) {
  std::vector<std::vector<T>> data(static_cast<std::size_t>(ranks), std::vector<T>(count));
  for (int r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < count; ++i) {
      const bool large = i % 3 == static_cast<std::size_t>(r % 3);
      data[static_cast<std::size_t>(r)][i] =
          make<T>((static_cast<double>(i % 97) - 40.0) / 3.0 * (r + 1) + (large ? 1e3 : 0.0));
    }
  return data;
}

template <class T>
std::vector<std::byte*> pointers(std::vector<std::vector<T>>& data) {
  std::vector<std::byte*> p;
  for (auto& d : data) p.push_back(reinterpret_cast<std::byte*>(d.data()));
  return p;
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void check_one_pass_equals_blocked() {
  for (const int ranks : {2, 3, 4})
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7},
                                    std::size_t{1001}, std::size_t{4099}})
      for (const auto op : {shm::Reduction::sum, shm::Reduction::mean})
        for (const double scale : {1.0, 0.5, 1.0 / 3.0}) {
          if (op == shm::Reduction::mean && scale != 1.0) continue;  // the transport's uses
          CAPTURE(ranks);
          CAPTURE(count);
          CAPTURE(scale);
          auto data = inputs<T>(ranks, count);
          const auto in = pointers(data);
          // One output.
          std::vector<T> want(count), got(count);
          std::byte* want_out = reinterpret_cast<std::byte*>(want.data());
          std::byte* got_out = reinterpret_cast<std::byte*>(got.data());
          elements::reduce<T>(in.data(), ranks, &want_out, 1, count, op, scale);
          REQUIRE(elements::reduce_in_one_pass<T>(in.data(), ranks, &got_out, false, count, op,
                                                  scale));
          CHECK(same_bytes(want, got));
          // Into every input, in place (allreduce_regions).
          auto blocked = data;
          const auto blocked_io = pointers(blocked);
          elements::reduce<T>(blocked_io.data(), ranks, blocked_io.data(), ranks, count, op,
                              scale);
          REQUIRE(elements::reduce_in_one_pass<T>(in.data(), ranks, in.data(), true, count, op,
                                                  scale));
          for (int r = 0; r < ranks; ++r) {
            CHECK(same_bytes(data[static_cast<std::size_t>(r)], want));
            CHECK(same_bytes(data[static_cast<std::size_t>(r)],
                             blocked[static_cast<std::size_t>(r)]));
          }
        }
}

}  // namespace

TEST_CASE("shared-memory reduction: bf16 results round as c10::BFloat16 does, ties to even") {
  // The reductions' own checks sum values exact in bf16, which never round: here the halfway
  // cases (low half 0x8000), and either side of them, for positive and negative values of many
  // exponents, and a signalling NaN, which must come back a quiet one.
  std::vector<std::uint32_t> floats{0x7F800001, 0x7FC00000};
  for (std::uint32_t high = 0x0000; high <= 0xFF7F; high += 0x0101)
    for (const std::uint32_t low : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
      if ((high & 0x7F80) != 0x7F80) floats.push_back((high << 16) | low);  // not inf or NaN
  for (const std::uint32_t bits : floats) {
    CAPTURE(bits);
    float value = 0;
    std::memcpy(&value, &bits, sizeof value);
    CHECK(elements::to_bf16(value).bits == c10::BFloat16(value).x);
  }
}

TEST_CASE("shared-memory reduction: the one-pass loop equals the blocked loop bitwise") {
  SUBCASE("float32") { check_one_pass_equals_blocked<float>(); }
  SUBCASE("float64") { check_one_pass_equals_blocked<double>(); }
  SUBCASE("bfloat16") { check_one_pass_equals_blocked<elements::Bf16>(); }
#if defined(__FLT16_MANT_DIG__)
  SUBCASE("float16") { check_one_pass_equals_blocked<_Float16>(); }
#endif
}

TEST_CASE("shared-memory reduction: the one-pass loop declines what it does not cover") {
  auto data = inputs<float>(5, 8);
  const auto in = pointers(data);
  std::vector<float> out(8);
  std::byte* o = reinterpret_cast<std::byte*>(out.data());
  CHECK_FALSE(elements::reduce_in_one_pass<float>(in.data(), 5, &o, false, 8,
                                                  shm::Reduction::sum, 1.0));
  CHECK_FALSE(elements::reduce_in_one_pass<float>(in.data(), 2, &o, false, 8,
                                                  shm::Reduction::max, 1.0));
  CHECK_FALSE(elements::reduce_in_one_pass<std::int32_t>(in.data(), 2, &o, false, 8,
                                                         shm::Reduction::sum, 1.0));
  // The entry points still reduce them, through the blocked loop: 5 ranks summed in rank order.
  shm::reduce(shm::DataType::f32, in.data(), 5, o, 8, shm::Reduction::sum);
  for (std::size_t i = 0; i < 8; ++i) {
    float want = data[0][i];
    for (std::size_t r = 1; r < 5; ++r) want += data[r][i];
    CHECK(out[i] == want);
  }
}

}  // namespace unit_shm_elements
