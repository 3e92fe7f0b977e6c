// Which gradients travel together: PyTorch's bucket assignment, as a free function the Reducer
// receives its plan from (and a unit test checks without any process group).
//
// Parameters are taken in reverse registration order, roughly the order backward produces their
// gradients. Each (dtype, device) has its own open bucket, since a bucket is one flat tensor.
// A bucket closes once it holds at least its cap, as PyTorch's buckets do: the first one then
// ends with the first large gradient backward produces, so a sizeable all-reduce starts while
// most of backward is still ahead. The first bucket of each dtype has the smaller first cap.
// Parameters that do not require a gradient are in no bucket.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../../detail/separate_compilation.hpp"

namespace accel::parallel::detail {

struct BucketCaps {
  double first_mb = 1.0;
  double rest_mb = 25.0;
};

// Buckets of parameter indices, in the order their all-reduces start.
ACCEL_DECL std::vector<std::vector<std::size_t>> assign_buckets(
    const std::vector<torch::Tensor>& parameters, BucketCaps caps);

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/bucket_assignment.ipp"
#endif
