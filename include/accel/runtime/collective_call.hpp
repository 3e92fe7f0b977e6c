// One collective of a group as its errors and the stuck-collective watch name it: operation,
// sequence number, dtype and shape, and the library call that issued it ("allreduce #12 (Float,
// shape 4x5) in save_state"). The group numbers its collectives (collective_check.hpp); the
// transports name their failures with it (c10d_transport.hpp, shared_memory_path.hpp).
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "../detail/shape_text.hpp"

namespace accel::runtime {

struct CollectiveCall {
  std::string operation;
  std::uint64_t sequence = 0;
  torch::Tensor tensor;            // undefined for a barrier
  std::string_view caller = {};    // a ProcessGroup::Caller's name, or empty
};

inline std::string describe(const CollectiveCall& call) {
  const std::string in = call.caller.empty() ? "" : fmt::format(" in {}", call.caller);
  if (!call.tensor.defined()) return fmt::format("{} #{}{}", call.operation, call.sequence, in);
  return fmt::format("{} #{} ({}, shape {}){}", call.operation, call.sequence,
                     c10::toString(call.tensor.scalar_type()),
                     accel::detail::shape_text(call.tensor.sizes(), "x"), in);
}

}  // namespace accel::runtime
