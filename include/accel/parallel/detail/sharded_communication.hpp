// Options::sharded_communication (options.hpp says what it does) as the sharded strategies apply
// it: the dtypes checked once when a strategy is attached, and each narrowed copy checked where
// a group would carry it.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string_view>

#include "../../detail/separate_compilation.hpp"
#include "../../options.hpp"
#include "../../runtime/process_group.hpp"

namespace accel::parallel::detail {

// Fails, naming the strategy and the value, unless each dtype is unset, bf16 or fp16.
ACCEL_DECL void check_sharded_communication(std::string_view strategy,
                                            const ShardedCommunicationOptions& communication);

// Whether `t` travels as a copy in `wire`: set, and narrower than t's own dtype.
inline bool narrows(const std::optional<torch::Dtype>& wire, const torch::Tensor& t) {
  return wire.has_value() && *wire != t.scalar_type();
}

// Fails where `group` would carry `sent`, a narrowed copy, through an fp32 stand-in (Gloo lacks
// bf16 before libtorch 2.6; the shared-memory path carries it): the rounding without the saving
// asked for. `field` names the option ("parameters", "gradients").
ACCEL_DECL void require_narrow_wire(const runtime::ProcessGroup& group, const torch::Tensor& sent,
                                    std::string_view strategy, std::string_view field);

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/sharded_communication.ipp"
#endif
