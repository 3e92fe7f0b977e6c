// UnitOrderCheck's members (unit_order_check.hpp includes this file in header-only mode).
#pragma once

#include <fmt/format.h>

#include <climits>

#include "../../../detail/error.hpp"
#include "../unit_order_check.hpp"

namespace accel::parallel::detail {

ACCEL_DECL void UnitOrderCheck::check(runtime::ProcessGroup& group, std::string_view strategy,
                                      const std::vector<std::string>& names) {
  // The largest digest and the largest complement: equal on every rank only if every rank's
  // digest is the same.
  const int mine = static_cast<int>(digest_ & 0x7fffffffu);
  torch::Tensor extremes = torch::tensor({mine, INT_MAX - mine}, torch::kInt);
  group.allreduce(extremes, runtime::ReduceOp::max);
  const bool same = extremes[0].item<int>() == INT_MAX - extremes[1].item<int>();
  const auto events = std::move(events_);
  const std::size_t count = count_;
  digest_ = fnv_offset;
  events_ = {};
  count_ = 0;
  if (same) return;
  std::string record;
  for (const auto& [event, unit] : events)
    record += fmt::format("{}{} {}", record.empty() ? "" : ", ",
                          event == Event::forward ? "forward" : "backward", names[unit]);
  if (count > events.size()) record += fmt::format(", and {} more", count - events.size());
  if (record.empty()) record = "none";
  accel::detail::fail(
      "{}: the ranks did not call the same Sharded units in the same order since the last "
      "check; on rank {} the forwards called and the backwards reached: {}. {} gathers a unit's "
      "parameters where the forward calls it and reduce-scatters its gradients where the "
      "backward reaches it, so a unit skipped on some ranks would exchange its parameters and "
      "gradients with another unit's. Call every unit on every rank (on an empty slice of the "
      "batch where none of its rows use it), or train with Zero2 or Ddp, which gather nothing "
      "in the forward (docs/concepts/strategies.md#sharded-units-and-data-dependent-control-flow)",
      strategy, group.rank(), record, strategy);
}

}  // namespace accel::parallel::detail
