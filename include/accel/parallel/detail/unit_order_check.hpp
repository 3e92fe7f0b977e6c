// Zero3 gathers a unit's parameters when the forward calls it and when the backward reaches it,
// and reduce-scatters its gradients after: collectives issued where the user's code calls the
// unit. Two ranks that call different units (data-dependent routing, an early exit taken on one
// rank) would pair one unit's collective with another's; where the two units have the same size
// nothing in the transport can tell, and each rank trains on the other's parameters and
// gradients. So each rank records which units its forwards called and its backwards reached, in
// order, and the ranks compare a digest of that record as each backward starts (the forwards'
// calls, before the backward gathers by them) and ends (the units it reached), and after a
// forward without a graph: one all-reduce of two integers each time. Where they differ every
// rank stops with an error that lists its own record, before any optimizer step can use what was
// mixed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../detail/separate_compilation.hpp"
#include "../../runtime/process_group.hpp"

namespace accel::parallel::detail {

class UnitOrderCheck {
 public:
  enum class Event : std::uint8_t { forward, backward };

  void record(Event event, std::size_t unit) {
    // FNV-1a over (event, unit): order matters, and a 31-bit digest travels as a Gloo int.
    for (const std::uint64_t byte : {static_cast<std::uint64_t>(event), std::uint64_t{unit}}) {
      digest_ ^= static_cast<std::uint32_t>(byte * 0x9E3779B97F4A7C15ull >> 32);
      digest_ *= 16777619u;
    }
    if (events_.size() < kept_events) events_.emplace_back(event, unit);
    ++count_;
  }

  // Every rank at the same point. `names`: each unit's name, for the error. Starts a new record.
  ACCEL_DECL void check(runtime::ProcessGroup& group, std::string_view strategy,
                        const std::vector<std::string>& names);

 private:
  static constexpr std::size_t kept_events = 48;  // listed in the error; the rest counted
  static constexpr std::uint32_t fnv_offset = 2166136261u;

  std::uint32_t digest_ = fnv_offset;
  std::vector<std::pair<Event, std::size_t>> events_;
  std::size_t count_ = 0;
};

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/unit_order_check.ipp"
#endif
