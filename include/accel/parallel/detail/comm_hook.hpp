// What a gradient bucket's all-reduce sends, as a type the Reducer is instantiated with (no
// virtual call and no flag in the hot path), the way PyTorch's DDP takes a communication hook:
//   - AllreduceHook: the bucket itself; the sum is divided by the world size on its way into the
//     gradients, and small buckets may take the registered-buffer path;
//   - CompressHook: a copy in a narrower dtype, divided before the cast (as PyTorch's fp16
//     compression hook does, so the sum of W values cannot overflow fp16), summed, and cast back
//     into the bucket.
#pragma once

#include <torch/torch.h>

#include "../../runtime/process_group.hpp"

namespace accel::parallel::detail {

struct AllreduceHook {
  static constexpr bool divides_before_sending = false;
  // The bucket itself travels: a small one may skip c10d over registered buffers
  // (direct_gloo.hpp), and on one host all may be all-reduced where they lie in shared memory.
  static constexpr bool sends_the_bucket = true;
  runtime::PendingCollective send(runtime::ProcessGroup& group, torch::Tensor& flat) const {
    return group.allreduce_async(flat);
  }
};

struct CompressHook {
  c10::ScalarType wire = torch::kHalf;
  static constexpr bool divides_before_sending = true;
  static constexpr bool sends_the_bucket = false;
  runtime::PendingCollective send(runtime::ProcessGroup& group, torch::Tensor& flat) const {
    return group.allreduce_async(flat, flat.div(group.size()).to(wire));
  }
};

}  // namespace accel::parallel::detail
