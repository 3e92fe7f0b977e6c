// sharded_communication.hpp's checks (that header includes this file in header-only mode).
#pragma once

#include "../../../detail/error.hpp"
#include "../../../detail/torch_compat.hpp"
#include "../../../runtime/wire_fallbacks.hpp"
#include "../sharded_communication.hpp"

namespace accel::parallel::detail {

ACCEL_DECL void check_sharded_communication(std::string_view strategy,
                                            const ShardedCommunicationOptions& communication) {
  const auto check = [&](std::string_view field, const std::optional<torch::Dtype>& dtype) {
    if (!dtype || *dtype == torch::kBFloat16 || *dtype == torch::kHalf) return;
    accel::detail::fail("{}: Options::sharded_communication.{} is {}; the sharded strategies send "
                        "torch::kBFloat16 or torch::kHalf in place of the parameters' own dtype, "
                        "or, unset, that dtype itself",
                        strategy, field, c10::toString(*dtype));
  };
  check("parameters", communication.parameters);
  check("gradients", communication.gradients);
}

ACCEL_DECL void require_narrow_wire(const runtime::ProcessGroup& group, const torch::Tensor& sent,
                                    std::string_view strategy, std::string_view field) {
  if (runtime::wire_native(sent) || (sent.is_cpu() && group.uses_shared_memory())) return;
  accel::detail::fail("{}: Options::sharded_communication.{} asks for {} on the wire, and Gloo "
                      "carries no {} on libtorch {} (between nodes, or with shared memory off): "
                      "it would travel as fp32, rounded but no smaller; use torch::kHalf, or "
                      "leave it unset",
                      strategy, field, c10::toString(sent.scalar_type()),
                      c10::toString(sent.scalar_type()), TORCH_VERSION);
}

}  // namespace accel::parallel::detail
