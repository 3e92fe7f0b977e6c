// Ddp's bucket assignment, without any process group: reverse order, caps, dtype groups,
// frozen parameters.
#include <accel/parallel/detail/bucket_assignment.hpp>
#include <doctest/doctest.h>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_bucket_assignment {

namespace {

using accel::parallel::detail::assign_buckets;
using Buckets = std::vector<std::vector<std::size_t>>;

// A trainable parameter of `floats` fp32 elements (4 bytes each).
torch::Tensor parameter(std::int64_t floats, torch::Dtype dtype = torch::kFloat) {
  return torch::zeros({floats}, dtype).requires_grad_(true);
}

constexpr double kib = 1.0 / 1024.0;  // in MiB

}  // namespace

TEST_CASE("buckets take parameters in reverse registration order") {
  const std::vector<torch::Tensor> params{parameter(10), parameter(10), parameter(10)};
  CHECK(assign_buckets(params, {.first_mb = 1, .rest_mb = 1}) == Buckets{{2, 1, 0}});
}

TEST_CASE("a bucket closes once it reaches its cap, the first cap is the smaller one") {
  // 1 KiB parameters (256 floats). First cap 1 KiB: the first bucket holds one; the others
  // reach their 2 KiB cap with two.
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 5; ++i) params.push_back(parameter(256));
  CHECK(assign_buckets(params, {.first_mb = kib, .rest_mb = 2 * kib}) ==
        Buckets{{4}, {3, 2}, {1, 0}});
  // A parameter bigger than the cap gets a bucket that it closes at once.
  const std::vector<torch::Tensor> big{parameter(10), parameter(1024), parameter(10)};
  CHECK(assign_buckets(big, {.first_mb = kib, .rest_mb = kib}) == Buckets{{2, 1}, {0}});
}

TEST_CASE("each dtype has buckets of its own") {
  const std::vector<torch::Tensor> params{parameter(4), parameter(4, torch::kDouble), parameter(4),
                                          parameter(4, torch::kDouble)};
  CHECK(assign_buckets(params, {}) == Buckets{{3, 1}, {2, 0}});
}

TEST_CASE("parameters that do not require a gradient are in no bucket") {
  std::vector<torch::Tensor> params{parameter(4), parameter(4), parameter(4)};
  params[1].requires_grad_(false);
  CHECK(assign_buckets(params, {}) == Buckets{{2, 0}});
  for (auto& p : params) p.requires_grad_(false);
  CHECK(assign_buckets(params, {}).empty());
}

}  // namespace unit_bucket_assignment
