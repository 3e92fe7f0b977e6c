#pragma once

namespace accel::detail {

// gcc 12 rejects `static_assert(false, ...)` in a template even when it is never instantiated;
// making the condition depend on a template parameter delays it to instantiation.
template <class...>
inline constexpr bool dependent_false = false;

}  // namespace accel::detail
