// CollectiveCheck; collective_check.hpp includes it in header-only mode.
#pragma once

#include <fmt/ranges.h>

#include "../c10d_transport.hpp"
#include "../collective_check.hpp"

namespace accel::runtime {

ACCEL_DECL CollectiveCall CollectiveCheck::operator()(std::string operation,
                                                      const torch::Tensor& tensor,
                                                      C10dTransport& c10d) {
  CollectiveCall call{std::move(operation), sequence_, tensor, caller_};
  ++sequence_;
  if (!enabled_) return call;
  const std::string description =
      tensor.defined() ? fmt::format("{} #{} dtype={} shape={}", call.operation, call.sequence,
                                     c10::toString(tensor.scalar_type()),
                                     fmt::join(tensor.sizes(), "x"))
                       : fmt::format("{} #{}", call.operation, call.sequence);
  const auto key = [&](int rank) {
    return fmt::format("accel/check/{}/{}", call.sequence, rank);
  };
  c10d.store()->set(key(c10d.rank()), store_bytes(description));
  const torch::Tensor mine =
      accel::detail::one_value(static_cast<std::int64_t>(std::hash<std::string>{}(description)));
  const CollectiveCall fingerprints{"allgather", sequence_, mine, caller_};
  const torch::Tensor all = c10d.allgather_by_list(mine, fingerprints);
  const bool agree = torch::equal(all, mine.expand({c10d.size()}));
  if (agree) return call;
  std::string calls;
  for (int r = 0; r < c10d.size(); ++r) {
    const auto bytes = c10d.store()->get(key(r));
    calls += fmt::format("\n  rank {}: {}", r, store_text(bytes));
  }
  accel::detail::fail("mismatched collective on rank {}: the ranks called different collectives at "
                      "the same point; every rank must issue the same collectives in the same "
                      "order with the same dtypes and shapes:{}",
                      c10d.rank(), calls);
}

}  // namespace accel::runtime
